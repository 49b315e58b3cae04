// NUMA placement for the CPU optimizer. On a host with several memory nodes (two sockets), an
// update thread reading masters and moments from the other socket's memory gets a fraction of
// the bandwidth it gets from its own. So the optimizer's threads are spread over the nodes that
// have CPUs (worker w on node node_of[w], allowed only that node's CPUs), and the host store's
// bytes are bound to the node of the worker that updates them (mbind, before the first touch:
// the placement does not depend on which thread zeroes or pins the pages). One node: nothing
// is pinned or bound. Linux system calls only (no libnuma).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "engine/base/status.h"

namespace mt {

// The memory nodes that have CPUs this process may run on (its affinity mask), with those
// CPUs. Nodes without usable CPUs (CXL memory, a GH200's GPU memory) are left out: no update
// thread runs there. An unreadable sysfs reads as one node holding the allowed CPUs.
struct NumaNodes {
  std::vector<int> ids;                // node numbers, ascending
  std::vector<std::vector<int>> cpus;  // usable CPUs of each
  static NumaNodes read(const std::string& sysfs_node_dir = "/sys/devices/system/node");
};

// "0-3,8,10-11" (sysfs cpulist) -> {0,1,2,3,8,10,11}; an error names the text.
Result<std::vector<int>> parse_cpu_list(const std::string& text);

// Where each of `threads` workers runs: contiguous runs of workers per node, in proportion to the
// node's usable CPUs (16 workers over 2 nodes of 8: workers 0-7 on the first, 8-15 on the
// second), so the contiguous blocks of a unit that consecutive workers update form one range per
// node. inactive() (one node or none): no pinning, no binding.
struct NumaPlacement {
  NumaNodes nodes;
  std::vector<int> worker_node;  // node id of each worker
  static NumaPlacement for_threads(int threads, const NumaNodes& nodes);
  static NumaPlacement none(int threads);  // the same workers, no node assigned (all -1)
  bool active() const { return nodes.ids.size() > 1; }
  const std::vector<int>& cpus_of(int node) const;  // empty if unknown
  std::string describe() const;  // "16 threads pinned over NUMA nodes 0 (8) and 1 (8)"
};

int resolve_thread_count(int threads);  // <= 0: the CPUs this process may run on
// The optimizer's `threads` (resolve_thread_count) placed over this host's nodes; not placed
// (no pinning, no binding) when MEGATRAIN_NUMA=off, to measure what placement gives.
NumaPlacement optimizer_placement(int threads);

// The calling thread may run only on `cpus`.
Status pin_current_thread(const std::vector<int>& cpus);
// Pages of [p, p + bytes) not yet touched will be allocated on `node` (MPOL_PREFERRED: another
// node when that one is full, never a failure at fault time). p and bytes page-aligned.
Status prefer_node(void* p, size_t bytes, int node);
// The node holding the page at p (touched), or -1 when the kernel cannot say.
int node_of_page(const void* p);
// The node that the policy of the memory at p prefers (prefer_node), or -1: another policy or
// none, an empty node mask, or the kernel cannot say.
int preferred_node(const void* p);

}  // namespace mt
