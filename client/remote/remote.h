// The remote commands of `megatrain`: thin wrappers over the generated gRPC stubs of
// proto/megatrain/v1/trainer.proto. They know the stubs and the CLI helpers, not the engine.
#pragma once
#include <string>

#include "client/cli.h"

namespace mt::cli {

// Runs remote command `cmd` (submit, list, status, watch, cancel, push, checkpoint, plan);
// returns its exit code, or -1 when `cmd` is not a remote command.
int run_remote_command(const std::string& cmd, const Args& a);

}  // namespace mt::cli
