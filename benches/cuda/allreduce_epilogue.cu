// Unfused baseline of examples/03_allreduce_bias_residual.rs: the epilogue that runs after
// `ncclAllReduce(x -> reduced)` in a tensor-parallel row-parallel linear layer,
//
//   out[r][c] = reduced[r][c] + bias[c] + residual[r][c]        (reduced, residual, out: rows x hidden)
//
// Entry points (plain pointers and sizes; n = rows * hidden):
//   allreduce_epilogue_f32 (const float* reduced, const float* bias, const float* residual, float* out,
//                           size_t n, size_t hidden)
//   allreduce_epilogue_bf16(const __nv_bfloat16* reduced, const __nv_bfloat16* bias,
//                           const __nv_bfloat16* residual, __nv_bfloat16* out, size_t n, size_t hidden)
//
// What a careful hand-written epilogue does: 16-byte vector loads and stores (4 floats, 8 bf16) when `hidden`
// is a multiple of the vector and the pointers are 16-byte aligned (cudaMalloc and ncclMemAlloc memory is), a
// scalar loop otherwise; arithmetic in float; a grid-stride loop sized by the launcher (one full wave); the
// column advanced incrementally instead of a 64-bit division per vector. Bytes: reads `reduced` and `residual`
// (2N elements, `bias` stays in cache), writes `out` (N).
//
// No NCCL include: the collective is the host's ncclAllReduce. Compiled by weft's JIT with the same nvcc and flags
// as the fused kernels (-std=c++17 -O3 -arch=sm_XX).
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace allreduce_epilogue {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 16 bytes of T, converted to float on load and back on store.
template <class T>
struct Vec16 {
  static constexpr int N = 16 / sizeof(T);
  float v[N];
  __device__ __forceinline__ void load(const T* p) {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < N; k++) v[k] = to_float(e[k]);
  }
  __device__ __forceinline__ void store(T* p) const {
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int k = 0; k < N; k++) e[k] = from_float<T>(v[k]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
};

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <class T>
__device__ void epilogue(const T* __restrict__ reduced, const T* __restrict__ bias, const T* __restrict__ residual,
                         T* __restrict__ out, size_t n, size_t hidden) {
  constexpr int V = Vec16<T>::N;
  const size_t thread = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t threads = size_t(gridDim.x) * blockDim.x;
  if (hidden % V == 0 && aligned16(reduced) && aligned16(bias) && aligned16(residual) && aligned16(out)) {
    const size_t vectors = n / V;
    const size_t step = (threads * V) % hidden;  // column advance per grid stride
    size_t col = (thread * V) % hidden;
    for (size_t k = thread; k < vectors; k += threads) {
      Vec16<T> a, r, b;
      a.load(reduced + k * V);
      r.load(residual + k * V);
      b.load(bias + col);
#pragma unroll
      for (int e = 0; e < V; e++) a.v[e] += b.v[e] + r.v[e];
      a.store(out + k * V);
      col += step;
      if (col >= hidden) col -= hidden;
    }
  } else {
    const size_t step = threads % hidden;
    size_t col = thread % hidden;
    for (size_t i = thread; i < n; i += threads) {
      out[i] = from_float<T>(to_float(reduced[i]) + to_float(bias[col]) + to_float(residual[i]));
      col += step;
      if (col >= hidden) col -= hidden;
    }
  }
}

}  // namespace allreduce_epilogue

extern "C" __global__ void allreduce_epilogue_f32(const float* reduced, const float* bias, const float* residual,
                                                  float* out, size_t n, size_t hidden) {
  allreduce_epilogue::epilogue<float>(reduced, bias, residual, out, n, hidden);
}

extern "C" __global__ void allreduce_epilogue_bf16(const __nv_bfloat16* reduced, const __nv_bfloat16* bias,
                                                   const __nv_bfloat16* residual, __nv_bfloat16* out, size_t n,
                                                   size_t hidden) {
  allreduce_epilogue::epilogue<__nv_bfloat16>(reduced, bias, residual, out, n, hidden);
}
