// megatrain-bench kernels: the memory-bound CUDA kernels of a step (RMSNorm, RoPE, SwiGLU, the
// embedding, y += x, bf16 conversions) at a model's shape, each against a device-to-device
// copy of the same bytes in the same run. A kernel's bytes are what it must read and write at
// least (its inputs once, its outputs once); `of_copy` is copy time / kernel time, the fraction
// of the copy's bandwidth the kernel reaches (issue 25's target: >= 0.7). Built only with CUDA.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_cuda.h"
#include "engine/model/model_config.h"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/swiglu.cuh"
#include "kernels/cuda/util.cuh"

namespace mt::bench {
namespace {

using bf = __nv_bfloat16;

// Device buffers of the suite, freed together.
struct Arena {
  std::vector<void*> blocks;
  bool ok = true;
  template <typename T>
  T* get(size_t n) {
    void* p = nullptr;
    ok &= cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess;
    if (p) blocks.push_back(p), cudaMemset(p, 0, n * sizeof(T));
    return static_cast<T*>(p);
  }
  ~Arena() {
    for (void* p : blocks) cudaFree(p);
  }
};

struct Kernel {
  const char* name;
  double bytes;  // read + written, at least
  std::function<bool()> run;
};

}  // namespace

int run_kernels(const Flags& f) {
  auto tokens = f.num("tokens", 4096), reps = f.num("reps", 10);
  const std::string preset = f.str("preset", "qwen2.5-7b");
  if (!tokens.ok() || !reps.ok() || *tokens < 1 || !f.check_all_used().ok())
    return std::fprintf(stderr, "kernels: bad flags (--preset NAME --tokens N --reps N)\n"), 2;
  auto cfg = preset_config(preset);
  if (!cfg.ok()) return std::fprintf(stderr, "kernels: %s\n", cfg.status().to_string().c_str()), 2;
  if (!require_gpu("kernels")) return 1;
  const int N = int(*tokens), C = cfg->hidden_size, F = cfg->intermediate_size, H = cfg->num_heads;
  const int KVH = cfg->num_kv_heads, D = cfg->head_dim, V = cfg->vocab_size;
  const size_t nc = size_t(N) * C, nf = size_t(N) * F, nqkv = size_t(N) * (H + 2 * KVH) * D;
  Arena a;
  bf *x = a.get<bf>(nc), *y = a.get<bf>(nc), *dy = a.get<bf>(nc), *w = a.get<bf>(C), *gu = a.get<bf>(2 * nf);
  bf *h = a.get<bf>(nf), *dgu = a.get<bf>(2 * nf), *qkv = a.get<bf>(nqkv), *wte = a.get<bf>(size_t(V) * C);
  float *rstd = a.get<float>(N), *dw = a.get<float>(C), *inv = a.get<float>(D / 2), *dwte = a.get<float>(size_t(V) * C);
  float *scratch = a.get<float>(cuda::rmsnorm_backward_scratch(N, C)), *f32 = a.get<float>(nc);
  int32_t* ids = a.get<int32_t>(N);
  std::vector<int32_t> host_ids(static_cast<size_t>(N));
  std::mt19937 rng(1);
  for (auto& t : host_ids) t = int32_t(rng() % uint32_t(V));
  cudaMemcpy(ids, host_ids.data(), host_ids.size() * sizeof(int32_t), cudaMemcpyHostToDevice);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const double e = sizeof(bf), rope_bytes = 2.0 * N * (H + KVH) * D * e;  // q and k rotated in place
  const std::vector<Kernel> kernels = {
      {"rmsnorm_forward", 2.0 * nc * e + C * e + N * 4.0,
       [&] { return cuda::rmsnorm_forward(y, rstd, x, w, N, C, 1e-6f, s).ok(); }},
      {"rmsnorm_backward", 4.0 * nc * e + N * 4.0 + C * (e + 4.0),  // dout, inp, dinp read and written
       [&] { return cuda::rmsnorm_backward(y, dw, dy, x, w, rstd, N, C, scratch, s).ok(); }},
      {"rope_forward", rope_bytes, [&] { return cuda::rope_forward(qkv, inv, nullptr, 1, N, H, KVH, D, 1.f, s).ok(); }},
      {"rope_backward", rope_bytes, [&] { return cuda::rope_backward(qkv, inv, nullptr, 1, N, H, KVH, D, 1.f, s).ok(); }},
      {"swiglu_forward", 3.0 * nf * e, [&] { return cuda::swiglu_forward(h, gu, N, F, s).ok(); }},
      {"swiglu_backward", 5.0 * nf * e, [&] { return cuda::swiglu_backward(dgu, h, gu, N, F, s).ok(); }},
      {"embedding_forward", 2.0 * nc * e + N * 4.0, [&] { return cuda::embedding_forward(y, ids, wte, N, C, s).ok(); }},
      {"embedding_backward", nc * e + 2.0 * nc * 4 + N * 4.0,  // fp32 rows read and written
       [&] { return cuda::embedding_backward(dwte, dy, ids, N, C, s).ok(); }},
      {"add_inplace", 3.0 * nc * e, [&] { return cuda::add_inplace(y, x, nc, s).ok(); }},
      {"convert_f32_to_bf16", nc * (4.0 + e), [&] { return cuda::convert_f32_to_bf16(y, f32, nc, s).ok(); }},
      {"convert_bf16_to_f32", nc * (4.0 + e), [&] { return cuda::convert_bf16_to_f32(f32, x, nc, s).ok(); }},
  };
  double most = 0;
  for (const Kernel& k : kernels) most = std::max(most, k.bytes);
  char *src = a.get<char>(size_t(most / 2) + 1), *dst = a.get<char>(size_t(most / 2) + 1);  // the copies
  if (!a.ok) return std::fprintf(stderr, "kernels: cannot allocate the buffers\n"), 1;
  int rc = 0;
  for (const Kernel& k : kernels) {
    bool ok = true;
    const double t = time_on_stream(s, int(*reps), [&] { ok &= k.run(); });
    const size_t half = size_t(k.bytes / 2);  // a copy of `half` bytes reads and writes k.bytes
    const double copy = time_on_stream(s, int(*reps), [&] { cudaMemcpyAsync(dst, src, half, cudaMemcpyDeviceToDevice, s); });
    ok &= cudaStreamSynchronize(s) == cudaSuccess;
    emit(Json::object({{"suite", "kernels"}, {"kernel", k.name}, {"preset", preset}, {"tokens", int64_t(N)},
                       {"bytes", k.bytes}, {"seconds", t}, {"gbps", k.bytes / t / 1e9},
                       {"copy_gbps", k.bytes / copy / 1e9}, {"of_copy", copy / t}, {"ok", ok}}),
         f.json());
    rc |= ok ? 0 : 1;
  }
  cudaStreamDestroy(s);
  return rc;
}

}  // namespace mt::bench
