#include "client/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace mt::cli {

Result<Args> Args::parse(int argc, char** argv, int first, const std::vector<std::string>& switches) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0) {
      a.pos_.push_back(s);
      continue;
    }
    std::string key = s.substr(2), value;
    if (auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (std::find(switches.begin(), switches.end(), key) == switches.end()) {
      if (i + 1 >= argc) return invalid_argument("flag --" + key + " needs a value");
      value = argv[++i];
    }
    a.flags_[key] = value;
  }
  return a;
}

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = flags_.find(k);
  return it == flags_.end() ? def : it->second;
}

Result<double> Args::number(const std::string& k, double def) const {
  auto it = flags_.find(k);
  if (it == flags_.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end) return invalid_argument("--" + k + " = '" + it->second + "' is not a number");
  return v;
}

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "megatrain: %s\n", message.c_str());
  return code;
}

void print_json(const Json& j) {
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

}  // namespace mt::cli
