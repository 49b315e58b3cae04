#include "engine/base/numa.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

namespace mt {

namespace {

// From <linux/mempolicy.h> (numaif.h is libnuma's, which we do not depend on).
constexpr int kMpolPreferred = 1;
constexpr unsigned long kMpolFNode = 1, kMpolFAddr = 2;
constexpr int kMaskBits = 1024;
constexpr size_t kWordBits = 8 * sizeof(unsigned long);
using NodeMask = unsigned long[kMaskBits / kWordBits];

std::set<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::set<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.insert(c);
  return out;
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

Result<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string part;
  auto bad = [&] { return invalid_argument("cpu list '" + text + "' is not like 0-3,8,10-11"); };
  while (std::getline(ss, part, ',')) {
    part.erase(std::remove_if(part.begin(), part.end(), [](char c) { return c == '\n' || c == ' '; }), part.end());
    if (part.empty()) continue;
    int lo = 0, hi = 0;
    char tail = 0;
    const size_t dash = part.find('-');
    if (dash == std::string::npos) {
      if (std::sscanf(part.c_str(), "%d%c", &lo, &tail) != 1) return bad();
      hi = lo;
    } else if (std::sscanf(part.c_str(), "%d-%d%c", &lo, &hi, &tail) != 2) {
      return bad();
    }
    if (lo < 0 || hi < lo || hi >= CPU_SETSIZE) return bad();
    for (int c = lo; c <= hi; ++c) out.push_back(c);
  }
  return out;
}

NumaNodes NumaNodes::read(const std::string& dir) {
  const std::set<int> allowed = allowed_cpus();
  NumaNodes n;
  std::vector<int> ids;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      int id = 0;
      char tail = 0;
      if (std::sscanf(e->d_name, "node%d%c", &id, &tail) == 1 && id >= 0 && id < kMaskBits) ids.push_back(id);
    }
    ::closedir(d);
  }
  std::sort(ids.begin(), ids.end());
  for (int id : ids) {
    std::ifstream f(dir + "/node" + std::to_string(id) + "/cpulist");
    std::string text;
    std::getline(f, text);
    auto cpus = parse_cpu_list(text);
    if (!cpus.ok()) continue;
    std::vector<int> usable;
    for (int c : *cpus)
      if (allowed.count(c)) usable.push_back(c);
    if (usable.empty()) continue;
    n.ids.push_back(id);
    n.cpus.push_back(std::move(usable));
  }
  if (n.ids.empty()) n = {{0}, {std::vector<int>(allowed.begin(), allowed.end())}};
  return n;
}

NumaPlacement NumaPlacement::for_threads(int threads, const NumaNodes& nodes) {
  NumaPlacement p;
  p.nodes = nodes;
  size_t total = 0;
  for (const auto& c : nodes.cpus) total += c.size();
  p.worker_node.assign(size_t(std::max(threads, 1)), nodes.ids.empty() ? -1 : nodes.ids[0]);
  if (total == 0) return p;
  // Node k takes workers [T * C_<k / C, T * C_<=k / C): contiguous, in proportion to its CPUs.
  size_t before = 0;
  for (size_t k = 0; k < nodes.ids.size(); ++k) {
    const size_t lo = p.worker_node.size() * before / total;
    before += nodes.cpus[k].size();
    const size_t hi = p.worker_node.size() * before / total;
    for (size_t w = lo; w < hi; ++w) p.worker_node[w] = nodes.ids[k];
  }
  return p;
}

NumaPlacement NumaPlacement::none(int threads) {
  NumaPlacement p;
  p.worker_node.assign(size_t(std::max(threads, 1)), -1);
  return p;
}

const std::vector<int>& NumaPlacement::cpus_of(int node) const {
  static const std::vector<int> kNone;
  for (size_t k = 0; k < nodes.ids.size(); ++k)
    if (nodes.ids[k] == node) return nodes.cpus[k];
  return kNone;
}

std::string NumaPlacement::describe() const {
  std::string s = std::to_string(worker_node.size()) + " threads";
  if (!active()) return s + " on one NUMA node (not pinned)";
  s += " pinned over NUMA nodes";
  for (size_t k = 0; k < nodes.ids.size(); ++k) {
    const long n = std::count(worker_node.begin(), worker_node.end(), nodes.ids[k]);
    s += (k == 0 ? " " : k + 1 == nodes.ids.size() ? " and " : ", ") + std::to_string(nodes.ids[k]) + " (" +
         std::to_string(n) + ")";
  }
  return s;
}

int resolve_thread_count(int threads) {
  if (threads > 0) return threads;
  const size_t n = allowed_cpus().size();
  return n > 0 ? int(n) : std::max(1, int(std::thread::hardware_concurrency()));
}

NumaPlacement optimizer_placement(int threads) {
  const char* env = std::getenv("MEGATRAIN_NUMA");
  if (env && std::string(env) == "off") return NumaPlacement::none(resolve_thread_count(threads));
  return NumaPlacement::for_threads(resolve_thread_count(threads), NumaNodes::read());
}

Status pin_current_thread(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus)
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  const int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  if (e != 0) return internal_error("pinning a thread to " + std::to_string(cpus.size()) + " CPUs: " + errno_text(e));
  return Status::Ok();
}

Status prefer_node(void* p, size_t bytes, int node) {
  if (node < 0 || node >= kMaskBits) return invalid_argument("NUMA node " + std::to_string(node) + " out of range");
  NodeMask mask = {};
  mask[size_t(node) / kWordBits] = 1UL << (size_t(node) % kWordBits);
  // maxnode: the kernel reads maxnode - 1 bits (as libnuma passes it).
  if (::syscall(SYS_mbind, p, bytes, kMpolPreferred, mask, kMaskBits + 1, 0) != 0)
    return internal_error("binding " + std::to_string(bytes) + " bytes of host memory to NUMA node " +
                          std::to_string(node) + " (mbind): " + errno_text(errno));
  return Status::Ok();
}

int preferred_node(const void* p) {
  int mode = -1;
  NodeMask mask = {};
  if (::syscall(SYS_get_mempolicy, &mode, mask, kMaskBits + 1, p, kMpolFAddr) != 0 || mode != kMpolPreferred) return -1;
  for (int n = 0; n < kMaskBits; ++n)
    if (mask[size_t(n) / kWordBits] >> (size_t(n) % kWordBits) & 1UL) return n;
  return -1;
}

int node_of_page(const void* p) {
  int node = -1;
  if (::syscall(SYS_get_mempolicy, &node, nullptr, 0, p, kMpolFNode | kMpolFAddr) != 0) return -1;
  return node;
}

}  // namespace mt
