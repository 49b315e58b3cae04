#include <cmath>

#include "kernels/cuda/adamw.cuh"
#include "kernels/cuda/device_util.cuh"

namespace mt::cuda {

namespace {

struct Coeffs {
  float b1, b2, eps, gs;
  cpu::AdamWCoefficients k;
};

template <typename S>
__global__ void adamw_kernel(float* param, const S* grad, S* m, S* v, __nv_bfloat16* shadow, size_t n, Coeffs c) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float g = detail::ld(grad[i]) * c.gs;
    const float mi = c.b1 * detail::ld(m[i]) + (1.f - c.b1) * g;
    const float vi = c.b2 * detail::ld(v[i]) + (1.f - c.b2) * g * g;
    m[i] = detail::st<S>(mi);
    v[i] = detail::st<S>(vi);
    float w = param[i];
    const float denom = sqrtf(vi) * c.k.inv_sqrt_bc2 + c.eps;
    w -= c.k.step_size * (mi / denom) + c.k.decay * w;
    param[i] = w;
    if (shadow) shadow[i] = __float2bfloat16_rn(w);
  }
}

}  // namespace

template <typename S>
CudaStatus adamw_update(float* param, const S* grad, S* m, S* v, __nv_bfloat16* shadow, size_t n,
                        const cpu::AdamWParams& p, cudaStream_t stream) {
  if (n == 0) return {};
  const Coeffs c{p.beta1, p.beta2, p.eps, p.grad_scale, cpu::adamw_coefficients(p)};
  clear_last_error();
  adamw_kernel<<<detail::blocks_for(n, 256), 256, 0, stream>>>(param, grad, m, v, shadow, n, c);
  return launched("adamw_kernel");
}

template CudaStatus adamw_update<float>(float*, const float*, float*, float*, __nv_bfloat16*, size_t,
                                        const cpu::AdamWParams&, cudaStream_t);
template CudaStatus adamw_update<__nv_bfloat16>(float*, const __nv_bfloat16*, __nv_bfloat16*, __nv_bfloat16*,
                                                __nv_bfloat16*, size_t, const cpu::AdamWParams&, cudaStream_t);

}  // namespace mt::cuda
