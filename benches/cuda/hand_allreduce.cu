// The quickstart's one-shot LSA all-reduce written by hand against NCCL's device API: the baseline that
// weft's #[weft::kernel] version must match (benches/dsl.rs). Same algorithm, same loops, same barriers: 16-byte
// loads and stores summed in float, then the tail one element per thread. Written as a CUDA programmer would,
// with plain uint4 accesses (it assumes 16-byte aligned buffers, which weft's packs check at run time instead).
#include <nccl_device.h>
#include <cuda_bf16.h>

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__device__ void hand_allreduce(ncclDevComm const& dev, ncclWindow_t win, size_t offset, T* out, size_t n) {
  constexpr size_t L = 16 / sizeof(T);
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dev, ncclTeamTagLsa(), blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
  size_t const start = blockIdx.x * (size_t)blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
  size_t const packs = n / L;
  for (size_t p = start; p < packs; p += stride) {
    float acc[L];
#pragma unroll
    for (size_t k = 0; k < L; k++) acc[k] = 0.0f;
    int const lsa_size = dev.lsaSize;  // Rust evaluates a range's bound once: so does the baseline
    for (int peer = 0; peer < lsa_size; peer++) {
      uint4 v = reinterpret_cast<const uint4*>(ncclGetLsaPointer(win, offset, peer))[p];
      T const* lanes = reinterpret_cast<T const*>(&v);
#pragma unroll
      for (size_t k = 0; k < L; k++) acc[k] += to_float(lanes[k]);
    }
    uint4 o;
    T* lanes = reinterpret_cast<T*>(&o);
#pragma unroll
    for (size_t k = 0; k < L; k++) lanes[k] = from_float<T>(acc[k]);
    reinterpret_cast<uint4*>(out)[p] = o;
  }
  for (size_t t = start; t < n - packs * L; t += stride) {
    size_t const i = packs * L + t;
    float acc = 0.0f;
    int const lsa_size = dev.lsaSize;
    for (int peer = 0; peer < lsa_size; peer++) acc += to_float(static_cast<T*>(ncclGetLsaPointer(win, offset, peer))[i]);
    out[i] = from_float<T>(acc);
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

extern "C" __global__ void hand_allreduce_f32(ncclDevComm dev, ncclWindow_t win, size_t offset, float* out, size_t n) {
  hand_allreduce<float>(dev, win, offset, out, n);
}

extern "C" __global__ void hand_allreduce_bf16(ncclDevComm dev, ncclWindow_t win, size_t offset, __nv_bfloat16* out,
                                               size_t n) {
  hand_allreduce<__nv_bfloat16>(dev, win, offset, out, n);
}
