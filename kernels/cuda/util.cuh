// Small CUDA utilities for the op table and the backend: y += x, y *= s, copy, zero, fp32 -> bf16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/cuda/status.cuh"

namespace mt::cuda {

// y = round(y + x): one fp32 add per element, rounded once to T.
template <typename T>
CudaStatus add_inplace(T* y, const T* x, size_t n, cudaStream_t stream);
// y = round(y * s).
template <typename T>
CudaStatus scale_inplace(T* y, float s, size_t n, cudaStream_t stream);
// Device-to-device copy and zero fill, stream-ordered, in bytes (any dtype).
CudaStatus copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t stream);
CudaStatus zero_bytes(void* dst, size_t bytes, cudaStream_t stream);
// Round to nearest even (as mt::float_to_bf16).
CudaStatus convert_f32_to_bf16(__nv_bfloat16* dst, const float* src, size_t n, cudaStream_t stream);
CudaStatus convert_bf16_to_f32(float* dst, const __nv_bfloat16* src, size_t n, cudaStream_t stream);

}  // namespace mt::cuda
