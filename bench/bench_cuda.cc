// GPU suites (built only with CUDA): link (pinned H2D / D2H / duplex through the CudaBackend,
// against a plain cudaMemcpyAsync baseline), gemm (bf16 TFLOPS of our cuBLASLt path against
// cublasGemmEx at transformer shapes) and attention (forward/backward TFLOPS, causal, fp32
// and bf16 storage; --kernel cudnn|mma|simt|all picks bf16's cuDNN SDPA, our tensor-core
// kernel, the portable simt one, or all for comparison). Without a device each prints a clear
// error and exits 1.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <functional>
#include <memory>
#include <type_traits>
#include <thread>
#include <string>
#include <vector>

#include "bench/bench.h"
#include "bench/bench_cuda.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/cuda/pinned_allocator.h"
#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_cudnn.cuh"
#include "kernels/cuda/matmul.cuh"

namespace mt::bench {

bool require_gpu(const char* suite) {
  if (cuda_available()) return true;
  std::fprintf(stderr, "megatrain-bench %s: %s\n", suite, cuda_describe().c_str());
  return false;
}

// Median seconds of `reps` runs of fn on `s`, timed with events (after one warm-up run).
double time_on_stream(cudaStream_t s, int reps, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  cudaDeviceSynchronize();  // the inputs' cudaMemset (legacy stream), which `s` (non-blocking) does not wait for
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a, s);
    fn();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

namespace {


// Median wall seconds of `reps` runs of fn (which must wait for its own work).
double time_wall(int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(seconds_since(t0));
  }
  return median(t);
}

}  // namespace

double measure_device_gemm_flops(bool bf16, int n, int reps) {
  std::unique_ptr<cuda::GemmContext> ctx;
  if (!cuda_available() || !cuda::GemmContext::create(ctx).ok()) return 0;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const size_t elems = size_t(n) * n, esize = bf16 ? 2 : 4;
  void *a = nullptr, *b = nullptr, *c = nullptr;
  double flops = 0;
  if (!cudaMalloc(&a, elems * esize) && !cudaMalloc(&b, elems * esize) && !cudaMalloc(&c, elems * esize)) {
    cudaMemset(a, 0, elems * esize), cudaMemset(b, 0, elems * esize);
    bool ok = true;
    const double t = time_on_stream(s, reps, [&] {
      if (bf16) {
        auto* x = static_cast<__nv_bfloat16*>(a);
        ok &= cuda::gemm<__nv_bfloat16>(false, true, n, n, n, 1.f, x, n, static_cast<__nv_bfloat16*>(b), n, 0.f,
                                         static_cast<__nv_bfloat16*>(c), n, *ctx, s).ok();
      } else {
        ok &= cuda::gemm<float>(false, true, n, n, n, 1.f, static_cast<float*>(a), n, static_cast<float*>(b), n, 0.f,
                                static_cast<float*>(c), n, *ctx, s).ok();
      }
    });
    if (ok) flops = 2.0 * double(n) * n * n / t;
  }
  cudaFree(a), cudaFree(b), cudaFree(c);
  cudaStreamDestroy(s);
  return flops;
}

// How long pinning takes (issue 18 point 8): `gib` GiB in chunks of `chunk-mib` (the HostStore
// pins ~1 GiB chunks), first from one thread, then from `threads` threads at once, each pass
// released before the next. Reports GB/s per pass and the locked-memory limit in force.
int run_pin(const Flags& f) {
  auto gib = f.num("gib", 16), chunk_mib = f.num("chunk-mib", 1024), threads = f.num("threads", 8);
  if (!gib.ok() || !chunk_mib.ok() || !threads.ok() || !f.check_all_used().ok() || *chunk_mib <= 0 || *threads < 1)
    return std::fprintf(stderr, "pin: bad flags\n"), 2;
  if (!require_gpu("pin")) return 1;
  const size_t chunk = size_t(*chunk_mib) << 20, n = std::max<size_t>(1, size_t(*gib * 1024 / *chunk_mib));
  PinnedAllocator alloc(0);
  std::string error;
  auto pass = [&](int nthreads) {
    std::vector<void*> ptrs(n, nullptr);
    std::mutex mu;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    std::atomic<size_t> next{0};
    for (int t = 0; t < nthreads; ++t)
      ts.emplace_back([&] {
        for (size_t i; (i = next++) < n;) {
          auto p = alloc.allocate(chunk);
          if (p.ok()) ptrs[i] = *p;
          else {
            std::lock_guard<std::mutex> l(mu);
            if (error.empty()) error = p.status().to_string();
          }
        }
      });
    for (auto& t : ts) t.join();
    const double s = seconds_since(t0);
    for (void* p : ptrs)
      if (p) alloc.release(p, chunk);
    return s;
  };
  const double one = pass(1), many = pass(int(*threads));
  const double gb = double(n * chunk) / 1e9;
  const size_t limit = memlock_limit_bytes();
  emit(Json::object({{"suite", "pin"},
                     {"bytes", int64_t(n * chunk)},
                     {"chunk_bytes", int64_t(chunk)},
                     {"one_thread_seconds", one},
                     {"one_thread_gbps", gb / one},
                     {"threads", int64_t(*threads)},
                     {"parallel_seconds", many},
                     {"parallel_gbps", gb / many},
                     {"memlock_limit", limit == SIZE_MAX ? std::string("unlimited") : std::to_string(limit)},
                     {"error", error}}),
       f.json());
  return error.empty() ? 0 : 1;
}

int run_link(const Flags& f) {
  auto mib = f.num("mib", 512), reps = f.num("reps", 10);
  if (!mib.ok() || !reps.ok() || !f.check_all_used().ok()) return std::fprintf(stderr, "link: bad flags\n"), 2;
  if (!require_gpu("link")) return 1;
  const size_t bytes = size_t(*mib) << 20;
  auto be = make_cuda_backend({});
  if (!be.ok()) return std::fprintf(stderr, "link: %s\n", be.status().to_string().c_str()), 1;
  Backend& b = **be;
  auto h1 = b.host_allocator().allocate(bytes), h2 = b.host_allocator().allocate(bytes);
  if (!h1.ok() || !h2.ok() || !b.reserve_device(2 * bytes + 4096).ok())
    return std::fprintf(stderr, "link: cannot allocate %zu bytes pinned + device\n", 2 * bytes), 1;
  void* d1 = *b.device_alloc(bytes);
  void* d2 = *b.device_alloc(bytes);
  const int n = int(*reps);
  const double h2d = time_wall(n, [&] { b.copy_h2d(d1, *h1, bytes), b.host_wait(b.record(StreamKind::kH2D)); });
  const double d2h = time_wall(n, [&] { b.copy_d2h(*h2, d2, bytes), b.host_wait(b.record(StreamKind::kD2H)); });
  const double dup = time_wall(n, [&] {
    b.copy_h2d(d1, *h1, bytes);
    b.copy_d2h(*h2, d2, bytes);
    b.host_wait(b.record(StreamKind::kH2D));
    b.host_wait(b.record(StreamKind::kD2H));
  });
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  const double base_h2d = time_on_stream(s, n, [&] { cudaMemcpyAsync(d1, *h1, bytes, cudaMemcpyHostToDevice, s); });
  const double base_d2h = time_on_stream(s, n, [&] { cudaMemcpyAsync(*h2, d2, bytes, cudaMemcpyDeviceToHost, s); });
  cudaStreamDestroy(s);
  const double gb = double(bytes) / 1e9;
  emit(Json::object({{"suite", "link"},
                     {"bytes", int64_t(bytes)},
                     {"h2d_gbps", gb / h2d},
                     {"d2h_gbps", gb / d2h},
                     {"duplex_gbps", 2 * gb / dup},
                     {"baseline_h2d_gbps", gb / base_h2d},
                     {"baseline_d2h_gbps", gb / base_d2h},
                     {"h2d_vs_baseline", base_h2d / h2d},
                     {"d2h_vs_baseline", base_d2h / d2h},
                     {"error", b.error().ok() ? std::string("") : b.error().to_string()}}),
       f.json());
  b.host_allocator().release(*h1, bytes);
  b.host_allocator().release(*h2, bytes);
  return b.error().ok() ? 0 : 1;
}

int run_gemm(const Flags& f) {
  auto tokens = f.num("tokens", 8192), reps = f.num("reps", 10);
  if (!tokens.ok() || !reps.ok() || !f.check_all_used().ok()) return std::fprintf(stderr, "gemm: bad flags\n"), 2;
  if (!require_gpu("gemm")) return 1;
  std::unique_ptr<cuda::GemmContext> ctx;
  cublasHandle_t h;
  if (!cuda::GemmContext::create(ctx).ok() || cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
    return std::fprintf(stderr, "gemm: cannot create cuBLAS handles\n"), 1;
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cublasSetStream(h, s);
  const int N = int(*tokens);
  struct Shape {
    const char* name;
    int C, OC;
  };  // qwen2.5-7b projections: out[N, OC] = in[N, C] @ W[OC, C]^T
  const Shape shapes[] = {{"qkv", 3584, 4608}, {"o", 3584, 3584}, {"gate_up", 3584, 37888}, {"down", 18944, 3584}};
  int rc = 0;
  for (const Shape& sh : shapes) {
    __nv_bfloat16 *a, *w, *c;
    float* dw;  // the weight gradient: fp32, accumulated (beta = 1) as the bf16 op table does
    if (cudaMalloc(&a, size_t(N) * sh.C * 2) || cudaMalloc(&w, size_t(sh.OC) * sh.C * 2) ||
        cudaMalloc(&c, size_t(N) * sh.OC * 2) || cudaMalloc(&dw, size_t(sh.OC) * sh.C * 4))
      return std::fprintf(stderr, "gemm: out of device memory\n"), 1;
    cudaMemset(a, 0, size_t(N) * sh.C * 2), cudaMemset(w, 0, size_t(sh.OC) * sh.C * 2);
    cudaMemset(c, 0, size_t(N) * sh.OC * 2), cudaMemset(dw, 0, size_t(sh.OC) * sh.C * 4);
    bool ok = true;
    const double ours = time_on_stream(s, int(*reps), [&] {
      ok &= cuda::gemm<__nv_bfloat16>(false, true, N, sh.OC, sh.C, 1.f, a, sh.C, w, sh.C, 0.f, c, sh.OC, *ctx, s).ok();
    });
    const float one = 1.f, zero = 0.f;
    const double ref = time_on_stream(s, int(*reps), [&] {
      ok &= cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.OC, N, sh.C, &one, w, CUDA_R_16BF, sh.C, a, CUDA_R_16BF, sh.C,
                         &zero, c, CUDA_R_16BF, sh.OC, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    });
    // dW[OC, C] += dout^T @ inp, dout = c [N, OC]: bf16 A/B, fp32 C (matmul_backward's dweight).
    const double ours_dw = time_on_stream(s, int(*reps), [&] {
      ok &= cuda::gemm<__nv_bfloat16>(true, false, sh.OC, sh.C, N, 1.f, c, sh.OC, a, sh.C, 1.f, dw, sh.C, *ctx, s).ok();
    });
    const double ref_dw = time_on_stream(s, int(*reps), [&] {
      ok &= cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, sh.C, sh.OC, N, &one, a, CUDA_R_16BF, sh.C, c, CUDA_R_16BF, sh.OC,
                         &one, dw, CUDA_R_32F, sh.C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
    });
    const double flops = 2.0 * N * sh.OC * sh.C;
    emit(Json::object({{"suite", "gemm"}, {"shape", sh.name}, {"M", int64_t(N)}, {"N", int64_t(sh.OC)},
                       {"K", int64_t(sh.C)}, {"tflops", flops / ours / 1e12}, {"cublas_tflops", flops / ref / 1e12},
                       {"vs_cublas", ref / ours}, {"dweight_tflops", flops / ours_dw / 1e12},
                       {"cublas_dweight_tflops", flops / ref_dw / 1e12}, {"dweight_vs_cublas", ref_dw / ours_dw},
                       {"ok", ok}}),
         f.json());
    rc |= ok ? 0 : 1;
    cudaFree(a), cudaFree(w), cudaFree(c), cudaFree(dw);
  }
  cublasDestroy(h);
  cudaStreamDestroy(s);
  return rc;
}

namespace {

// One causal attention forward and backward at T tokens in E storage on `kernel` ("cudnn",
// "mma" or "simt"): the seconds of each; cuDNN's workspace in `workspace`, why it failed in `why`, and
// `refused` when cuDNN declined a shape whose deterministic backward's dP is past the reservation
// (T = 32768 at 32 heads: a documented limit), which the JSON records without failing the bench;
// any other refusal fails it.
template <typename E>
bool time_attention(const std::string& kernel, int T, int H, int KVH, int D, int reps, cudaStream_t s, double& fwd,
                    double& bwd, size_t& workspace, std::string& why, bool& refused) {
  const size_t rows = size_t(T), nqkv = rows * (H + 2 * KVH) * D, nout = rows * H * D;
  E *qkv = nullptr, *out = nullptr, *dout = nullptr, *dqkv = nullptr;
  float* lse = nullptr;
  void* ws = nullptr;
  const size_t ws_bytes = kernel == "cudnn" ? cuda::cudnn_attention_workspace_bytes(1, T, H, KVH, D) : 0;
  bool ok = !cudaMalloc(&qkv, nqkv * sizeof(E)) && !cudaMalloc(&out, nout * sizeof(E)) &&
            !cudaMalloc(&lse, size_t(H) * T * 4) && !cudaMalloc(&dout, nout * sizeof(E)) &&
            !cudaMalloc(&dqkv, nqkv * sizeof(E)) && (!ws_bytes || !cudaMalloc(&ws, ws_bytes));
  std::unique_ptr<cuda::CudnnAttention> cudnn;
  const cuda::AttentionShape shape{1, T, H, KVH, D};
  if (ok && kernel == "cudnn") {
    const cuda::CudaStatus c = cuda::CudnnAttention::create(cudnn, ws, ws_bytes);
    if (!c.ok()) why = cuda::describe(c);
    ok = c.ok() && cudnn->supports(shape, nullptr, &why);
    refused = c.ok() && !ok && cuda::cudnn_dp_past_reservation(1, T, H);  // only the documented limit
  }
  if (ok) {
    cudaMemset(qkv, 0, nqkv * sizeof(E)), cudaMemset(dout, 0, nout * sizeof(E));
    if constexpr (std::is_same_v<E, __nv_bfloat16>) {
      if (cudnn) {
        fwd = time_on_stream(s, reps, [&] { ok &= cudnn->forward(out, lse, qkv, shape, nullptr, s).ok(); });
        bwd = time_on_stream(s, reps, [&] { ok &= cudnn->backward(dqkv, dout, qkv, out, lse, shape, nullptr, s).ok(); });
        workspace = cudnn->workspace_used();
      }
    }
    if (!cudnn) {
      cuda::set_attention_kernel(kernel == "mma" ? cuda::AttentionKernel::kTensorCore : cuda::AttentionKernel::kSimt);
      fwd = time_on_stream(s, reps, [&] { ok &= cuda::attention_forward(out, lse, qkv, nullptr, 1, T, H, KVH, D, s).ok(); });
      bwd = time_on_stream(s, reps, [&] {
        ok &= cuda::attention_backward(dqkv, dout, qkv, out, lse, nullptr, 1, T, H, KVH, D, s).ok();
      });
    }
  }
  cudnn.reset();
  cudaFree(qkv), cudaFree(out), cudaFree(lse), cudaFree(dout), cudaFree(dqkv), cudaFree(ws);
  return ok;
}

// The kernels timed for one storage type: cuDNN and the tensor-core kernel ("mma", head_dim 64
// and 128) take bf16 only; fp32 always runs the simt kernel.
std::vector<std::string> attention_kernels(bool bf16, int D, const std::string& selected) {
  if (!bf16) return {"simt"};
  std::vector<std::string> all = {"cudnn", "simt"};
  if (D == 64 || D == 128) all.insert(all.begin() + 1, "mma");
  if (selected == "all") return all;
  for (const auto& k : all)
    if (k == selected) return {k};
  return {"simt"};
}

}  // namespace

int run_attention(const Flags& f) {
  auto heads = f.num("heads", 32), kv = f.num("kv-heads", 8), dim = f.num("head-dim", 128), reps = f.num("reps", 3);
  auto max_seq = f.num("max-seq", 8192), min_seq = f.num("min-seq", 1024);
  const std::string dtypes = f.str("dtype", "fp32,bf16"), kernel = f.str("kernel", "all");
  if (!heads.ok() || !kv.ok() || !dim.ok() || !reps.ok() || !max_seq.ok() || !min_seq.ok() || *min_seq < 1 ||
      !f.check_all_used().ok() || (kernel != "cudnn" && kernel != "mma" && kernel != "simt" && kernel != "all"))
    return std::fprintf(stderr, "attention: bad flags (--kernel cudnn|mma|simt|all)\n"), 2;
  if (!require_gpu("attention")) return 1;
  const int H = int(*heads), KVH = int(*kv), D = int(*dim);
  const cuda::AttentionKernel saved = cuda::attention_kernel();
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  int rc = 0;
  for (const char* dtype : {"fp32", "bf16"}) {
    if (dtypes.find(dtype) == std::string::npos) continue;
    const bool bf = std::string(dtype) == "bf16";
    for (const std::string& k : attention_kernels(bf, D, kernel)) {
      for (int T = int(*min_seq); T <= int(*max_seq); T *= 2) {
        double fwd = 0, bwd = 0;
        size_t workspace = 0;
        std::string why;
        bool refused = false;
        const double built_s = cuda::cudnn_graph_builds().seconds;
        const bool ok =
            bf ? time_attention<__nv_bfloat16>(k, T, H, KVH, D, int(*reps), s, fwd, bwd, workspace, why, refused)
               : time_attention<float>(k, T, H, KVH, D, int(*reps), s, fwd, bwd, workspace, why, refused);
        const double flops = 4.0 * double(T) * T * D * H / 2;  // causal: half of QK^T and PV
        Json r = Json::object({{"suite", "attention"}, {"seq", int64_t(T)}, {"heads", int64_t(H)},
                               {"kv_heads", int64_t(KVH)}, {"head_dim", int64_t(D)}, {"dtype", dtype}, {"kernel", k},
                               {"fwd_tflops", ok ? flops / fwd / 1e12 : 0.0},
                               {"bwd_tflops", ok ? 2.5 * flops / bwd / 1e12 : 0.0}, {"ok", ok}});
        if (k == "cudnn") {
          r.set("workspace_bytes", int64_t(workspace));
          r.set("graph_build_seconds", cuda::cudnn_graph_builds().seconds - built_s);  // the forward's and backward's
        }
        if (!why.empty()) r.set("error", why);
        if (refused) r.set("refused", true);
        emit(r, f.json());
        rc |= ok || refused ? 0 : 1;
      }
    }
  }
  cuda::set_attention_kernel(saved);
  cudaStreamDestroy(s);
  return rc;
}

}  // namespace mt::bench
