#include "engine/optim/optimizer_shards.h"

#include <algorithm>
#include <numeric>

namespace mt {

std::vector<int> optimizer_shard_owners(const std::vector<ParamSchema>& units, int processes) {
  std::vector<int> owners(units.size(), 0);
  if (processes <= 1) return owners;
  std::vector<size_t> order(units.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return units[a].numel > units[b].numel; });
  std::vector<size_t> load(size_t(processes), 0);
  for (size_t u : order) {
    const size_t r = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owners[u] = int(r);
    load[r] += units[u].numel;
  }
  return owners;
}

MomentUnits moments_of_rank(const std::vector<int>& owners, int rank) {
  MomentUnits m(owners.size());
  for (size_t u = 0; u < owners.size(); ++u) m[u] = owners[u] == rank;
  return m;
}

}  // namespace mt
