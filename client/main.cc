// megatrain: the MegaTrain CLI. Local commands link the engine and need no daemon; remote
// commands talk to megatraind over gRPC.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "client/cli.h"
#include "engine/base/omp_wait_policy.h"
#ifdef MEGATRAIN_HAVE_REMOTE
#include "client/remote/remote.h"
#endif

namespace {

const char* kUsageText =
    "usage: megatrain COMMAND [ARGS] [--json]\n"
    "\n"
    "local commands (no daemon needed):\n"
    "  train SPEC [--out DIR] [--steps N]   run a job in the foreground (Ctrl-C or SIGTERM checkpoints and exits)\n"
    "  plan SPEC [--host-memory SIZE] [--device-memory SIZE]   memory plan (offline)\n"
    "  eval --model DIR --data FILE [--format text|uint16|uint32|llmc] [--seq-len T]\n"
    "                                       mean loss per token of a model over a file\n"
    "  inspect PATH                         tensors of a safetensors file, HF model or checkpoint\n"
    "  tokenize INPUT... --tokenizer DIR|byte --out DIR [--format F] [--threads N]   jsonl/text -> token shards\n"
    "  export CHECKPOINT OUT_DIR [--dtype bf16|fp32] [--overwrite]   a Hugging Face model directory\n"
#ifdef MEGATRAIN_HAVE_REMOTE
    "\n"
    "remote commands (megatraind; --server ADDR, --tls-ca FILE, --token-file FILE or\n"
    "MEGATRAIN_SERVER, MEGATRAIN_TLS_CA, MEGATRAIN_TOKEN_FILE):\n"
    "  submit SPEC [--priority N] [--watch]   list [--state S] [--name SUBSTRING]   status ID\n"
    "  watch ID   cancel ID   checkpoint ID   pause ID   resume ID   delete ID [--keep-checkpoints]\n"
    "  push ID FILE --format tokens-u16|tokens-u32|text   plan SPEC --server ADDR\n"
    "  logs ID|daemon [-f] [--tail N] [--since T]   checkpoints ID\n"
    "  export --remote ID OUT_DIR [--step N] [--dtype bf16|fp32] [--overwrite]   (OUT_DIR under its data root)\n"
#endif
    "\n"
    "--json prints one JSON object per line. megatrain COMMAND --help prints the command's usage.\n"
    "exit codes: 0 success, 1 job failed, 2 usage or spec error, 3 server unreachable or unauthenticated\n";

}  // namespace

int main(int argc, char** argv) {
  mt::use_passive_omp_wait_policy(argv);
  // A file grown past RLIMIT_FSIZE (ulimit -f) fails its write with EFBIG, reported naming the
  // file, instead of SIGXFSZ ending the process halfway through a checkpoint or an export.
  std::signal(SIGXFSZ, SIG_IGN);
  using namespace mt::cli;
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsageText, argc < 2 ? stderr : stdout);
    return argc < 2 ? kUsage : kOk;
  }
  const std::string cmd = argv[1];
  if (const char* usage = command_usage(cmd); usage && wants_help(argc, argv, 2)) {
    std::printf("usage: megatrain %s\n", usage);
    return kOk;
  }
  auto args = Args::parse(argc, argv, 2, {"json", "watch", "insecure", "overwrite", "keep-checkpoints", "follow", "max-seq-len", "shard-optimizer", "nvme-masters", "from-start"});
  report_errors_as_json(std::find(argv + 2, argv + argc, std::string("--json")) != argv + argc);
  if (!args.ok()) return fail(kUsage, args.status().message());
  if (mt::Status s = check_flags(cmd, *args); !s.ok())
    return fail(kUsage, s.message() + "\nusage: megatrain " + command_usage(cmd));
  const bool remote_plan = cmd == "plan" && (args->has("server") || std::getenv("MEGATRAIN_SERVER"));
  if (cmd == "train") return cmd_train(*args);
  if (cmd == "plan" && !remote_plan) return cmd_plan_local(*args);
  if (cmd == "eval") return cmd_eval(*args);
  if (cmd == "inspect") return cmd_inspect(*args);
  if (cmd == "tokenize") return cmd_tokenize(*args);
  if (cmd == "export" && !args->has("remote")) return cmd_export(*args);
#ifdef MEGATRAIN_HAVE_REMOTE
  if (int rc = run_remote_command(cmd, *args); rc >= 0) return rc;
#else
  if (remote_plan) return fail(kUsage, "this megatrain was built without the remote commands (no gRPC)");
#endif
  std::fprintf(stderr, "megatrain: unknown command '%s'\n\n%s", cmd.c_str(), kUsageText);
  return kUsage;
}
