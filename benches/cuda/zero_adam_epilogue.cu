// Unfused baseline of examples/05_zero_optimizer.rs: the AdamW update of this rank's shard that runs between
// `ncclReduceScatter(grads -> grad)` and `ncclAllGather(param -> params)` in a ZeRO-style optimizer step:
//
//   g      = grad_scale * grad[i]
//   m      = beta1 * m + (1 - beta1) * g
//   v      = beta2 * v + (1 - beta2) * g * g
//   master = master - lr * ((m / bias_correction1) / (sqrt(v / bias_correction2) + eps) + weight_decay * master)
//   param  = master rounded to T
//
// Entry points (plain pointers and sizes; every array holds `count` elements, this rank's shard):
//   zero_adam_epilogue_f32 (const float* grad, float* master, float* m, float* v, float* param, size_t count,
//                           float lr, float beta1, float beta2, float eps, float weight_decay,
//                           float bias_correction1, float bias_correction2, float grad_scale)
//   zero_adam_epilogue_bf16(const __nv_bfloat16* grad, float* master, float* m, float* v, __nv_bfloat16* param,
//                           size_t count, ... the same scalars)
//
// Four elements per thread per trip with vector loads and stores (16 bytes of f32 state, 16 or 8 bytes of T)
// when the pointers allow, a scalar loop otherwise; float arithmetic; a grid-stride loop sized by the launcher.
// Bytes: reads grad (s bytes per element) and master, m, v (12), writes master, m, v (12) and param (s).
//
// No NCCL include: the collectives are the host's. Compiled by weft's JIT with the same nvcc and flags as the fused
// kernels.
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace zero_adam_epilogue {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Four elements of T: 16 bytes of float, 8 bytes of bf16.
template <class T>
struct Vec4;
template <>
struct Vec4<float> {
  static __device__ __forceinline__ void load(const float* p, float (&v)[4]) {
    float4 r = *reinterpret_cast<const float4*>(p);
    v[0] = r.x, v[1] = r.y, v[2] = r.z, v[3] = r.w;
  }
  static __device__ __forceinline__ void store(float* p, const float (&v)[4]) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  }
};
template <>
struct Vec4<__nv_bfloat16> {
  static __device__ __forceinline__ void load(const __nv_bfloat16* p, float (&v)[4]) {
    uint2 raw = *reinterpret_cast<const uint2*>(p);
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; k++) v[k] = __bfloat162float(e[k]);
  }
  static __device__ __forceinline__ void store(__nv_bfloat16* p, const float (&v)[4]) {
    uint2 raw;
    __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&raw);
#pragma unroll
    for (int k = 0; k < 4; k++) e[k] = __float2bfloat16_rn(v[k]);
    *reinterpret_cast<uint2*>(p) = raw;
  }
};

__device__ __forceinline__ bool aligned(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

struct Hyper {
  float lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2, grad_scale;
};

// One element's update; returns the new master weight.
__device__ __forceinline__ float adamw(float grad, float& master, float& m, float& v, Hyper const& h) {
  float g = grad * h.grad_scale;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  float step = (m / h.bias_correction1) / (sqrtf(v / h.bias_correction2) + h.eps);
  master = master - h.lr * (step + h.weight_decay * master);
  return master;
}

template <class T>
__device__ void update(const T* __restrict__ grad, float* __restrict__ master, float* __restrict__ m,
                       float* __restrict__ v, T* __restrict__ param, size_t count, Hyper h) {
  const size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t threads = size_t(gridDim.x) * blockDim.x;
  const bool vectors = aligned(grad, 4 * sizeof(T)) && aligned(param, 4 * sizeof(T)) && aligned(master, 16) &&
                       aligned(m, 16) && aligned(v, 16);
  size_t done = 0;
  if (vectors) {
    const size_t quads = count / 4;
    for (size_t k = thread; k < quads; k += threads) {
      float g[4], w[4], mm[4], vv[4], out[4];
      Vec4<T>::load(grad + 4 * k, g);
      Vec4<float>::load(master + 4 * k, w);
      Vec4<float>::load(m + 4 * k, mm);
      Vec4<float>::load(v + 4 * k, vv);
#pragma unroll
      for (int e = 0; e < 4; e++) out[e] = adamw(g[e], w[e], mm[e], vv[e], h);
      Vec4<float>::store(master + 4 * k, w);
      Vec4<float>::store(m + 4 * k, mm);
      Vec4<float>::store(v + 4 * k, vv);
      Vec4<T>::store(param + 4 * k, out);
    }
    done = quads * 4;
  }
  for (size_t i = done + thread; i < count; i += threads) {
    param[i] = from_float<T>(adamw(to_float(grad[i]), master[i], m[i], v[i], h));
  }
}

}  // namespace zero_adam_epilogue

extern "C" __global__ void zero_adam_epilogue_f32(const float* grad, float* master, float* m, float* v, float* param,
                                                  size_t count, float lr, float beta1, float beta2, float eps,
                                                  float weight_decay, float bias_correction1,
                                                  float bias_correction2, float grad_scale) {
  zero_adam_epilogue::update<float>(grad, master, m, v, param, count,
                                    {lr, beta1, beta2, eps, weight_decay, bias_correction1, bias_correction2,
                                     grad_scale});
}

extern "C" __global__ void zero_adam_epilogue_bf16(const __nv_bfloat16* grad, float* master, float* m, float* v,
                                                   __nv_bfloat16* param, size_t count, float lr, float beta1,
                                                   float beta2, float eps, float weight_decay,
                                                   float bias_correction1, float bias_correction2,
                                                   float grad_scale) {
  zero_adam_epilogue::update<__nv_bfloat16>(grad, master, m, v, param, count,
                                            {lr, beta1, beta2, eps, weight_decay, bias_correction1,
                                             bias_correction2, grad_scale});
}
