#include "client/remote/remote.h"

#include <map>

#include "client/remote/commands.h"

namespace mt::cli {

int run_remote_command(const std::string& cmd, const Args& a) {
  using Command = int (*)(Connection&, const Args&);
  static const std::map<std::string, Command> kCommands = {
      {"submit", remote_submit}, {"list", remote_list},   {"status", remote_status},
      {"watch", remote_watch},   {"cancel", remote_cancel}, {"push", remote_push},
      {"checkpoint", remote_checkpoint}, {"plan", remote_plan},   {"pause", remote_pause},
      {"resume", remote_resume},         {"delete", remote_delete}, {"logs", remote_logs},
      {"checkpoints", remote_checkpoints}, {"export", remote_export}};
  auto it = kCommands.find(cmd);
  if (it == kCommands.end()) return -1;
  auto conn = Connection::open(a);
  if (!conn.ok()) return fail(kUsage, conn.status().message());
  return it->second(*conn, a);
}

}  // namespace mt::cli
