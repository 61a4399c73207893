// An experiment of benches/gemm.rs, not weft's API: the Hopper mainloop that docs/gemm.md names as the way to 0.8x
// cuBLAS, written out whole so that one GPU run measures it next to the 128 x 128 `gemm_block` and the 128 x 256
// `gemm_wide.cu`. What changes against gemm_wide.cu, all at once:
// - the copies leave the MMA warps: a producer warpgroup (one thread issues, the other 127 retire at once) loads each
//   stage with TMA (cp.async.bulk.tensor, two tensor maps encoded on the host), so the two consumer warpgroups
//   issue nothing but `wgmma` and their epilogue;
// - 64-wide k stages in the 128-byte swizzle that TMA writes (A: 128 rows of 128 bytes; B: four 64-column boxes of
//   64 k-rows), 4 stages of 48 KB in dynamic shared memory;
// - stages handed over through mbarriers (full: the producer's expect_tx and TMA's completed bytes; empty: one
//   arrival per consumer warp), so no __syncthreads in the mainloop;
// - MMAs overlapped across stages: `wgmma.wait_group 1` after each stage's four m64n256k16, releasing the stage
//   before (the one whose MMAs are then complete);
// - persistent blocks (one per SM, striding over the tiles in gemm_tiles' grouped order), so the producer fills the
//   next tile's stages while the consumers run this tile's epilogue;
// - setmaxnreg: the producer gives back registers (40), the consumers take them (232).
// Every mbarrier wait is bounded (about 2^32 clocks, 2 s): a wrong byte count or parity traps instead of hanging.
//
// Entry point (compiled for sm_90a with -DWEFT_GEMM_WGMMA; on anything else it compiles to a kernel that traps):
//   gemm_tma_bf16(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
//                 __nv_bfloat16* out, size_t m, size_t n, size_t k)
// Row-major out (m x n) = a (m x k) * b (k x n), f32 accumulation, rounded once. map_a: a as 2-D bf16 {k, m}
// (innermost first), row stride 2k bytes, box {64, 128}; map_b: b as {n, k}, row stride 2n bytes, box {64, 64}; both
// CU_TENSOR_MAP_SWIZZLE_128B, no interleave, no fill. m a multiple of 128, n of 256, k of 64; GEMM_TMA_THREADS (384)
// threads per block, GEMM_TMA_SMEM bytes of dynamic shared memory, any grid (blocks stride over tiles).
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace gemm_tma {

constexpr int BM = 128, BN = 256, BK = 64, STAGES = 4, CONSUMERS = 2;
constexpr uint32_t A_BYTES = BM * BK * 2, B_BOX_BYTES = BK * 64 * 2, B_BYTES = BK * BN * 2;
constexpr uint32_t STAGE_BYTES = A_BYTES + B_BYTES;
// Clock cycles a barrier wait may take before the kernel traps: about 2 s at the H200's 1.98 GHz.
constexpr long long WAIT_LIMIT = 1ll << 32;

// CUtensorMap's size and alignment (cuda.h), opaque here: the host encodes it, the TMA unit reads it.
struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// One arrival that also tells the barrier how many bytes its phase still waits for.
__device__ __forceinline__ void barrier_arrive_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool barrier_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits until the phase of `bar` with this parity has completed (acquire); traps after WAIT_LIMIT clocks.
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  if (barrier_try_wait(bar, parity)) return;
  long long start = clock64();
  while (!barrier_try_wait(bar, parity)) {
    if (clock64() - start > WAIT_LIMIT) __trap();
  }
}

// The box of `map` at coordinates (c0 innermost, c1) into shared memory at `dst`, completing bytes on `bar`.
__device__ __forceinline__ void tma_load(uint32_t dst, const TensorMap* map, uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same, written to the same shared offset of every CTA of the cluster in `ctas` (a bit per CTA rank), each
// completing its bytes on the barrier at `bar`'s offset in that CTA.
__device__ __forceinline__ void tma_load_multicast(uint32_t dst, const TensorMap* map, uint32_t bar, int32_t c0,
                                                   int32_t c1, uint16_t ctas) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "h"(ctas)
      : "memory");
}

// One arrival on the barrier at `bar`'s offset in the cluster's CTA `rank` (this one included), released to the
// cluster: this CTA's reads of the stage happen before whatever the arrival lets that CTA's producer do.
__device__ __forceinline__ void barrier_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n\t.reg .b32 remote;\n\t"
      "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n\t}" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// Waits for the phase of this CTA's `bar` with this parity, acquiring what the cluster's arrivals released.
__device__ __forceinline__ bool barrier_try_wait_cluster(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

__device__ __forceinline__ void barrier_wait_cluster(uint32_t bar, uint32_t parity) {
  if (barrier_try_wait_cluster(bar, parity)) return;
  long long start = clock64();
  while (!barrier_try_wait_cluster(bar, parity)) {
    if (clock64() - start > WAIT_LIMIT) __trap();
  }
}

// Every thread of the cluster arrives, then waits for all the others (not .aligned: a warp may arrive diverged).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// A wgmma matrix descriptor with the 128-byte swizzle (layout type 1).
__device__ __forceinline__ uint64_t desc(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
  return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

struct Acc {
  float d[128];
};

__device__ __forceinline__ void fence_operands(Acc& acc) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc.d[i])::"memory");
}

// Tile t of the grouped order (gemm_tiles' and gemm_wide.cu's): eight bands of `band` rows at a time (BM, or a
// cluster's CLUSTER * BM), column by column; tiles_m counts those bands.
__device__ __forceinline__ void tile_origin(size_t t, size_t tiles_m, size_t tiles_n, size_t band, size_t& row0,
                                            size_t& col0) {
  const size_t group = 8;
  size_t first_row = (t / (group * tiles_n)) * group;
  size_t rows = tiles_m - first_row < group ? tiles_m - first_row : group;
  size_t within = t % (group * tiles_n);
  row0 = (first_row + within % rows) * band;
  col0 = (within / rows) * BN;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && defined(WEFT_GEMM_WGMMA)
#define GEMM_TMA_HAS_WGMMA 1
// d (this warpgroup's 64 x 256 f32, this thread's 128 values) += A (64 x 16, K-major) x B (16 x 256, N-major).
__device__ __forceinline__ void mma_m64n256k16(Acc& c, uint64_t desc_a, uint64_t desc_b) {
  float* d = c.d;
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, 1, 1, 1, 0, 1;"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]),
        "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]),
        "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]),
        "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b));
}
#endif

}  // namespace gemm_tma

#define GEMM_TMA_THREADS (128 * (gemm_tma::CONSUMERS + 1))
// The dynamic shared memory a launch needs: the stages, 1 KB to align them to 1024 bytes (TMA's 128-byte swizzle
// and the descriptors address absolute bits), and the 2 x STAGES barriers.
#define GEMM_TMA_SMEM (gemm_tma::STAGES * gemm_tma::STAGE_BYTES + 1024 + 2 * gemm_tma::STAGES * 8)

namespace gemm_tma {
#if defined(GEMM_TMA_HAS_WGMMA)
// The kernel, for clusters of CLUSTER CTAs (1 or 2) along m. With 2, the CTAs of a cluster take the two 128-row
// halves of one 256 x 256 tile pair and share B: each loads two of B's four boxes per stage and multicasts them to
// both, so a CTA reads 32 KB of operands per stage instead of 48 (128 FLOP per byte instead of 85). A stage is then
// free only when the consumers of both CTAs are done with it (each arrives on both CTAs' empty barriers), and both
// CTAs walk the same tiles and stages in step.
template <int CLUSTER>
__device__ __forceinline__ void gemm(const TensorMap& map_a, const TensorMap& map_b, __nv_bfloat16* out, size_t m,
                                     size_t n, size_t k) {
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = shared_address(smem_raw);
  const uint32_t stages = raw + ((1024 - (raw & 1023)) & 1023);
  const uint32_t full = stages + STAGES * STAGE_BYTES, empty = full + STAGES * 8;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
  const size_t first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
  const size_t tiles_m = m / (CLUSTER * BM), tiles_n = n / BN, tiles = tiles_m * tiles_n, ktiles = k / BK;
  const uint32_t warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      barrier_init(full + 8 * s, 1);
      barrier_init(empty + 8 * s, CLUSTER * CONSUMERS * 4);
    }
    // The barriers' initialisation, visible to the async proxy (TMA's completions) and to the other threads.
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  // With a cluster, also the other CTA's: its multicasts and arrivals may reach this one's barriers next.
  if (CLUSTER > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (size_t t = first; t < tiles; t += step) {
        size_t row0, col0;
        tile_origin(t, tiles_m, tiles_n, CLUSTER * BM, row0, col0);
        row0 += rank * BM;
        for (size_t kt = 0; kt < ktiles; ++kt, ++it) {
          const uint32_t s = it % STAGES, stage = stages + s * STAGE_BYTES;
          // A fresh barrier counts its phase -1 as complete, so the first round through the stages does not wait.
          if (CLUSTER > 1) {
            barrier_wait_cluster(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
          } else {
            barrier_wait(empty + 8 * s, ((it / STAGES) & 1) ^ 1);
          }
          barrier_arrive_expect(full + 8 * s, STAGE_BYTES);
          tma_load(stage, &map_a, full + 8 * s, int32_t(kt * BK), int32_t(row0));
#pragma unroll
          for (int j = 0; j < BN / 64; ++j) {
            if (CLUSTER == 1) {
              tma_load(stage + A_BYTES + j * B_BOX_BYTES, &map_b, full + 8 * s, int32_t(col0 + 64 * j), int32_t(kt * BK));
            } else if (j % CLUSTER == rank) {
              tma_load_multicast(stage + A_BYTES + j * B_BOX_BYTES, &map_b, full + 8 * s, int32_t(col0 + 64 * j),
                                 int32_t(kt * BK), uint16_t((1u << CLUSTER) - 1));
            }
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const uint32_t consumer = warpgroup - 1;
    // One arrival of this warp on stage s's empty barrier in every CTA of the cluster.
    auto release = [&](uint32_t s) {
      if (lane != 0) return;
      if (CLUSTER == 1) {
        barrier_arrive(empty + 8 * s);
      } else {
        for (uint32_t r = 0; r < CLUSTER; ++r) barrier_arrive_cluster(empty + 8 * s, r);
      }
    };
    uint32_t it = 0;
    for (size_t t = first; t < tiles; t += step) {
      size_t row0, col0;
      tile_origin(t, tiles_m, tiles_n, CLUSTER * BM, row0, col0);
      row0 += rank * BM;
      Acc acc;
#pragma unroll
      for (int i = 0; i < 128; ++i) acc.d[i] = 0.0f;
      for (size_t kt = 0; kt < ktiles; ++kt, ++it) {
        const uint32_t s = it % STAGES, stage = stages + s * STAGE_BYTES;
        barrier_wait(full + 8 * s, (it / STAGES) & 1);
        fence_operands(acc);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          mma_m64n256k16(acc, desc(stage + consumer * 64 * 128 + kk * 32, 16, 1024),
                         desc(stage + A_BYTES + kk * 2048, B_BOX_BYTES, 1024));
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        // The previous stage's MMAs are complete once at most this stage's are in flight: hand it back.
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
        if (kt > 0) release((it - 1) % STAGES);
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      fence_operands(acc);
      if (ktiles > 0) release((it - 1) % STAGES);
      // Fragment f of the warp: columns 8f.., rows lane / 4 (+ 8 for values 2 and 3), columns 2 (lane % 4) (+ 1).
      size_t row = row0 + consumer * 64 + warp * 16 + lane / 4;
      size_t col = col0 + (lane % 4) * 2;
#pragma unroll
      for (int f = 0; f < 32; ++f) {
        *reinterpret_cast<__nv_bfloat162*>(out + row * n + col + f * 8) =
            __floats2bfloat162_rn(acc.d[4 * f], acc.d[4 * f + 1]);
        *reinterpret_cast<__nv_bfloat162*>(out + (row + 8) * n + col + f * 8) =
            __floats2bfloat162_rn(acc.d[4 * f + 2], acc.d[4 * f + 3]);
      }
    }
  }
  // No CTA of a cluster leaves while the other may still multicast into it or arrive on its barriers.
  if (CLUSTER > 1) cluster_sync();
}
#endif
}  // namespace gemm_tma

extern "C" __global__ void __launch_bounds__(GEMM_TMA_THREADS, 1)
    gemm_tma_bf16(const __grid_constant__ gemm_tma::TensorMap map_a, const __grid_constant__ gemm_tma::TensorMap map_b,
                  __nv_bfloat16* out, size_t m, size_t n, size_t k) {
#if defined(GEMM_TMA_HAS_WGMMA)
  gemm_tma::gemm<1>(map_a, map_b, out, m, n, k);
#else
  __trap();
#endif
}

// The same with clusters of two CTAs sharing B (m a multiple of 256, an even grid).
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(GEMM_TMA_THREADS, 1)
    gemm_tma_cluster_bf16(const __grid_constant__ gemm_tma::TensorMap map_a,
                          const __grid_constant__ gemm_tma::TensorMap map_b, __nv_bfloat16* out, size_t m, size_t n,
                          size_t k) {
#if defined(GEMM_TMA_HAS_WGMMA)
  gemm_tma::gemm<2>(map_a, map_b, out, m, n, k);
#else
  __trap();
#endif
}
