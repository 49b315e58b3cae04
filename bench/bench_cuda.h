// What the GPU suites (bench_cuda.cc, bench_kernels.cc) share. Built only with CUDA.
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace mt::bench {

// False, with the reason on stderr, when there is no usable device.
bool require_gpu(const char* suite);
// Median seconds of `reps` runs of fn on `s`, timed with events (after one warm-up run).
double time_on_stream(cudaStream_t s, int reps, const std::function<void()>& fn);

}  // namespace mt::bench
