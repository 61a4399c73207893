// Unfused baseline of examples/04_rmsnorm.rs: the residual add + RMSNorm that runs between
// `ncclReduceScatter(x -> reduced)` and `ncclAllGather(normed -> out)` in a tensor-parallel (sequence-parallel)
// transformer layer, on this rank's rows:
//
//   h            = reduced + residual
//   residual_out = h
//   normed       = h / sqrt(mean(h^2) + eps) * weight        (PyTorch's RMSNorm: eps inside the root)
//
// Entry points (plain pointers and sizes; every matrix is rows x hidden, weight has hidden elements):
//   rmsnorm_epilogue_f32 (const float* reduced, const float* residual, const float* weight, float* residual_out,
//                         float* normed, size_t rows, size_t hidden, float eps)
//   rmsnorm_epilogue_bf16(const __nv_bfloat16* reduced, const __nv_bfloat16* residual,
//                         const __nv_bfloat16* weight, __nv_bfloat16* residual_out, __nv_bfloat16* normed,
//                         size_t rows, size_t hidden, float eps)
//
// One block per row (blocks loop over rows; block size a multiple of 32), 16-byte vector loads and stores when
// `hidden` is a multiple of the vector (4 floats, 8 bf16) and the pointers are 16-byte aligned, float arithmetic,
// `h` kept in shared memory for rows of up to 8192 columns (wider rows are re-read from residual_out), the same
// structure as the fused kernel (examples/kernels/rmsnorm.rs) minus the communication. Bytes per row: reads
// reduced and residual, writes residual_out and normed (weight stays in cache).
//
// No NCCL include: the collectives are the host's. Compiled by weft's JIT with the same nvcc and flags as the fused
// kernels.
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace rmsnorm_epilogue {

constexpr size_t CACHE_COLUMNS = 8192;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 16 bytes of T, as floats.
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
  // To and from shared memory in float4 pieces (no bank conflicts).
  __device__ __forceinline__ void save(float* cache) const {
#pragma unroll
    for (int k = 0; k < N; k += 4)
      *reinterpret_cast<float4*>(cache + k) = make_float4(v[k], v[k + 1], v[k + 2], v[k + 3]);
  }
  __device__ __forceinline__ void restore(const float* cache) {
#pragma unroll
    for (int k = 0; k < N; k += 4) {
      float4 f = *reinterpret_cast<const float4*>(cache + k);
      v[k] = f.x;
      v[k + 1] = f.y;
      v[k + 2] = f.z;
      v[k + 3] = f.w;
    }
  }
};

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// Sum over the block; every thread gets the result. The leading barrier makes back-to-back calls safe.
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < (blockDim.x + 31) / 32 ? warp_sums[threadIdx.x] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) w += __shfl_xor_sync(0xffffffffu, w, offset);
    if (threadIdx.x == 0) warp_sums[0] = w;
  }
  __syncthreads();
  return warp_sums[0];
}

template <class T>
__device__ void residual_rmsnorm(const T* __restrict__ reduced, const T* __restrict__ residual,
                                 const T* __restrict__ weight, T* __restrict__ residual_out, T* __restrict__ normed,
                                 size_t rows, size_t hidden, float eps) {
  __shared__ __align__(16) float cache[CACHE_COLUMNS];
  __shared__ float warp_sums[32];
  constexpr int V = Vec16<T>::N;
  const bool vectors = hidden % V == 0 && aligned16(reduced) && aligned16(residual) && aligned16(weight) &&
                       aligned16(residual_out) && aligned16(normed);
  const bool cached = hidden <= CACHE_COLUMNS;
  for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const size_t base = row * hidden;
    float squares = 0.0f;
    if (vectors) {
      for (size_t k = threadIdx.x; k < hidden / V; k += blockDim.x) {
        Vec16<T> h, r;
        h.load(reduced + base + k * V);
        r.load(residual + base + k * V);
#pragma unroll
        for (int e = 0; e < V; e++) {
          h.v[e] += r.v[e];
          squares += h.v[e] * h.v[e];
        }
        h.store(residual_out + base + k * V);
        if (cached) h.save(cache + k * V);
      }
    } else {
      for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
        float h = to_float(reduced[base + c]) + to_float(residual[base + c]);
        residual_out[base + c] = from_float<T>(h);
        if (cached) cache[c] = h;
        squares += h * h;
      }
    }
    const float scale = rsqrtf(block_sum(squares, warp_sums) / float(hidden) + eps);
    if (vectors) {
      for (size_t k = threadIdx.x; k < hidden / V; k += blockDim.x) {
        Vec16<T> h, w;
        if (cached) {
          h.restore(cache + k * V);
        } else {
          h.load(residual_out + base + k * V);
        }
        w.load(weight + k * V);
#pragma unroll
        for (int e = 0; e < V; e++) h.v[e] = h.v[e] * scale * w.v[e];
        h.store(normed + base + k * V);
      }
    } else {
      for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
        float h = cached ? cache[c] : to_float(residual_out[base + c]);
        normed[base + c] = from_float<T>(h * scale * to_float(weight[c]));
      }
    }
  }
}

}  // namespace rmsnorm_epilogue

extern "C" __global__ void rmsnorm_epilogue_f32(const float* reduced, const float* residual, const float* weight,
                                                float* residual_out, float* normed, size_t rows, size_t hidden,
                                                float eps) {
  rmsnorm_epilogue::residual_rmsnorm<float>(reduced, residual, weight, residual_out, normed, rows, hidden, eps);
}

extern "C" __global__ void rmsnorm_epilogue_bf16(const __nv_bfloat16* reduced, const __nv_bfloat16* residual,
                                                 const __nv_bfloat16* weight, __nv_bfloat16* residual_out,
                                                 __nv_bfloat16* normed, size_t rows, size_t hidden, float eps) {
  rmsnorm_epilogue::residual_rmsnorm<__nv_bfloat16>(reduced, residual, weight, residual_out, normed, rows, hidden,
                                                    eps);
}
