// Unfused baseline of examples/06_moe_dispatch.rs: the local kernels around NCCL's variable-size all-to-all
// (grouped ncclSend/ncclRecv) in a mixture-of-experts layer with top-1 routing. Host flow per layer:
//
//   moe_route_counts      which tokens go to which rank: counts[R], offsets[R], slot[t]      (1 block)
//   ncclAllToAll(counts -> recv_counts), copy both to the host, synchronize               (sizes for NCCL p2p)
//   moe_pack_<T>          send[slot[t]] = x[t], send_expert[slot[t]] = experts[t]         (tokens by destination)
//   grouped ncclSend/ncclRecv of tokens and expert ids                                    (dispatch)
//   ... the experts ...
//   grouped ncclSend/ncclRecv of the expert outputs back to their sources                 (combine)
//   moe_unpack_<T>        out[t] = gate[t] * back[slot[t]]
//
// Entry points (plain pointers and sizes; R <= 64 ranks; expert e lives on rank e / experts_per_rank):
//   moe_route_counts(const uint32_t* experts, uint32_t* counts, uint32_t* offsets, uint32_t* slot, size_t tokens,
//                    uint32_t experts_per_rank, uint32_t nranks)     one block, a multiple of 32 threads, <= 1024
//   moe_pack_f32 / moe_pack_bf16(const T* x, const uint32_t* experts, const uint32_t* slot, T* send,
//                    uint32_t* send_expert, size_t tokens, size_t hidden)    one block per token (blocks loop)
//   moe_unpack_f32 / moe_unpack_bf16(const T* back, const uint32_t* slot, const float* gate, T* out,
//                    size_t tokens, size_t hidden)                           one block per token (blocks loop)
//
// Tokens keep their order within a destination (a stable grouping), so the receive layout (by source rank, then
// token order) is the fused kernels' layout. Rows are moved with 16-byte vectors when `hidden` and the pointers
// allow, scalars otherwise.
//
// No NCCL include: the communication is the host's. Compiled by weft's JIT with the same nvcc and flags as the fused
// kernels.
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace moe_baseline {

constexpr uint32_t MAX_RANKS = 64;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// One row of `hidden` elements from `from` to `to`, by the block's threads, scaled by `scale` unless it is null.
template <class T>
__device__ __forceinline__ void move_row(const T* __restrict__ from, T* __restrict__ to, size_t hidden,
                                         const float* scale) {
  constexpr size_t V = 16 / sizeof(T);
  if (hidden % V == 0 && aligned16(from) && aligned16(to)) {
    for (size_t k = threadIdx.x; k < hidden / V; k += blockDim.x) {
      uint4 raw = reinterpret_cast<const uint4*>(from)[k];
      if (scale != nullptr) {
        T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
        for (size_t i = 0; i < V; i++) e[i] = from_float<T>(*scale * to_float(e[i]));
      }
      reinterpret_cast<uint4*>(to)[k] = raw;
    }
  } else {
    for (size_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      to[c] = scale != nullptr ? from_float<T>(*scale * to_float(from[c])) : from[c];
    }
  }
}

}  // namespace moe_baseline

extern "C" __global__ void moe_route_counts(const uint32_t* experts, uint32_t* counts, uint32_t* offsets,
                                            uint32_t* slot, size_t tokens, uint32_t experts_per_rank,
                                            uint32_t nranks) {
  using moe_baseline::MAX_RANKS;
  // before[warp][dest]: the warp's tokens for dest, then (after the prefix) those of the earlier warps.
  __shared__ uint32_t before[32][MAX_RANKS];
  __shared__ uint32_t shared_counts[MAX_RANKS];
  __shared__ uint32_t shared_offsets[MAX_RANKS];
  const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const uint32_t lanes_below = (1u << lane) - 1;
  for (uint32_t d = lane; d < nranks; d += 32) before[warp][d] = 0;
  __syncwarp();
  // Each warp a contiguous segment, 32 tokens at a time: __match_any_sync groups them by destination and ranks
  // each token in its group (the same algorithm as the fused side's moe_route).
  const size_t span = size_t(warps) * 32, segment = (tokens + span - 1) / span * 32;
  const size_t first = warp * segment, end = first + segment < tokens ? first + segment : tokens;
  const uint32_t busy = segment == 0 ? 0 : uint32_t((tokens + segment - 1) / segment);  // warps with tokens
  for (size_t chunk = first; chunk < end; chunk += 32) {
    const size_t t = chunk + lane;
    uint32_t dest = nranks;  // none: past the end, or an expert on no rank
    if (t < end && experts[t] / experts_per_rank < nranks) dest = experts[t] / experts_per_rank;
    const uint32_t group = __match_any_sync(0xffffffffu, dest);
    const uint32_t rank = __popc(group & lanes_below);
    if (dest < nranks) slot[t] = before[warp][dest] + rank;  // place in the segment's group, for now
    __syncwarp();
    if (dest < nranks && rank == 0) before[warp][dest] += __popc(group);
    __syncwarp();
  }
  __syncthreads();
  for (uint32_t d = threadIdx.x; d < nranks; d += blockDim.x) {
    uint32_t running = 0;
    for (uint32_t w = 0; w < busy; w++) {
      const uint32_t here = before[w][d];
      before[w][d] = running;
      running += here;
    }
    shared_counts[d] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t running = 0;
    for (uint32_t d = 0; d < nranks; d++) {
      shared_offsets[d] = running;
      running += shared_counts[d];
    }
  }
  __syncthreads();
  for (size_t t = first + lane; t < end; t += 32) {
    const uint32_t d = experts[t] / experts_per_rank;
    if (d < nranks) slot[t] += shared_offsets[d] + before[warp][d];
  }
  for (uint32_t d = threadIdx.x; d < nranks; d += blockDim.x) {
    counts[d] = shared_counts[d];
    offsets[d] = shared_offsets[d];
  }
}

template <class T>
__device__ void pack(const T* x, const uint32_t* experts, const uint32_t* slot, T* send, uint32_t* send_expert,
                     size_t tokens, size_t hidden) {
  for (size_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const size_t s = slot[t];
    if (threadIdx.x == 0) send_expert[s] = experts[t];
    moe_baseline::move_row(x + t * hidden, send + s * hidden, hidden, nullptr);
  }
}

template <class T>
__device__ void unpack(const T* back, const uint32_t* slot, const float* gate, T* out, size_t tokens,
                       size_t hidden) {
  for (size_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float weight = gate[t];
    moe_baseline::move_row(back + size_t(slot[t]) * hidden, out + t * hidden, hidden, &weight);
  }
}

extern "C" __global__ void moe_pack_f32(const float* x, const uint32_t* experts, const uint32_t* slot, float* send,
                                        uint32_t* send_expert, size_t tokens, size_t hidden) {
  pack<float>(x, experts, slot, send, send_expert, tokens, hidden);
}

extern "C" __global__ void moe_pack_bf16(const __nv_bfloat16* x, const uint32_t* experts, const uint32_t* slot,
                                         __nv_bfloat16* send, uint32_t* send_expert, size_t tokens, size_t hidden) {
  pack<__nv_bfloat16>(x, experts, slot, send, send_expert, tokens, hidden);
}

extern "C" __global__ void moe_unpack_f32(const float* back, const uint32_t* slot, const float* gate, float* out,
                                          size_t tokens, size_t hidden) {
  unpack<float>(back, slot, gate, out, tokens, hidden);
}

extern "C" __global__ void moe_unpack_bf16(const __nv_bfloat16* back, const uint32_t* slot, const float* gate,
                                           __nv_bfloat16* out, size_t tokens, size_t hidden) {
  unpack<__nv_bfloat16>(back, slot, gate, out, tokens, hidden);
}
