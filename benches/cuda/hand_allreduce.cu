// The quickstart's one-shot LSA all-reduce written by hand against NCCL's device API: the baseline that
// weft's #[weft::kernel] version must match (benches/dsl.rs). Same algorithm, same loop, same barriers.
#include <nccl_device.h>
#include <cuda_bf16.h>

template <typename T>
__device__ void hand_allreduce(ncclDevComm const& dev, ncclWindow_t win, size_t offset, T* out, size_t n) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dev, ncclTeamTagLsa(), blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_relaxed);
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    T acc = T(0.0f);
    int const lsa_size = dev.lsaSize;  // Rust evaluates a range's bound once: so does the baseline
    for (int peer = 0; peer < lsa_size; peer++) {
      acc += static_cast<T*>(ncclGetLsaPointer(win, offset, peer))[i];
    }
    out[i] = acc;
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
