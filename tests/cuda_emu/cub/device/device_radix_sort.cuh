// cub::DeviceRadixSort::SortPairs for the CUDA emulation (tests/cuda_emu): a stable sort by the
// keys' bits [begin_bit, end_bit), as cub's. The temporary storage it asks for is written over in
// full (under ASan, scratch smaller than asked for is caught), and the input is left unchanged.
// Arguments are checked at once; the sort runs when its stream reaches it (streams.h).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "tests/cuda_emu/streams.h"

namespace cub {

struct DeviceRadixSort {
  template <typename K, typename V>
  static cudaError_t SortPairs(void* temp, size_t& temp_bytes, const K* keys_in, K* keys_out, const V* values_in,
                               V* values_out, int n, int begin_bit = 0, int end_bit = int(sizeof(K) * 8),
                               cudaStream_t stream = nullptr, bool = false) {
    const size_t need = 512 + size_t(n > 0 ? n : 0) * (sizeof(K) + sizeof(V));
    if (!temp) {
      temp_bytes = need;
      return cudaSuccess;
    }
    if (temp_bytes < need || begin_bit < 0 || end_bit > int(sizeof(K) * 8) || begin_bit >= end_bit)
      return cudaErrorInvalidValue;
    mt_emu::enqueue(stream, [=] { sort(temp, need, keys_in, keys_out, values_in, values_out, n, begin_bit, end_bit); }, true);
    return cudaSuccess;
  }

 private:
  template <typename K, typename V>
  static void sort(void* temp, size_t need, const K* keys_in, K* keys_out, const V* values_in, V* values_out, int n,
                   int begin_bit, int end_bit) {
    std::memset(temp, 0xff, need);
    const auto field = [&](K k) {
      const unsigned long long u = static_cast<unsigned long long>(k) >> begin_bit;
      return end_bit - begin_bit >= 64 ? u : u & ((1ull << (end_bit - begin_bit)) - 1);
    };
    std::vector<int> order(size_t(n > 0 ? n : 0));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return field(keys_in[a]) < field(keys_in[b]); });
    std::vector<K> k(order.size());
    std::vector<V> v(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      k[i] = keys_in[order[i]];
      v[i] = values_in[order[i]];
    }
    std::copy(k.begin(), k.end(), keys_out);
    std::copy(v.begin(), v.end(), values_out);
  }
};

}  // namespace cub
