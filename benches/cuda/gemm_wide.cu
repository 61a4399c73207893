// An experiment of benches/gemm.rs, not weft's API: does a wider tile lift the `wgmma` GEMM past the bound that L2
// bandwidth sets for weft's 128 x 128 tile (docs/gemm.md, "What bounds a 128 x 128 tile")? It is gemm_block's
// `wgmma` mainloop (device/cuda/weft.cuh) with one change, the tile: 128 x 256 instead of 128 x 128, so each block
// reads 768 bytes of operands per 65 536 FLOP (85 per byte) instead of 512 per 32 768 (64 per byte). Everything else
// is kept, so that the comparison isolates the tile: two warpgroups (each a 64 x 256 half, one
// wgmma.mma_async.m64n256k16 per k step of 16), the same 64-byte-swizzle stage layouts (B: eight 32-column atoms),
// 3 cp.async stages of 32 k (72 KB of dynamic shared memory, so one block per multiprocessor), `wait_group 0` after
// each stage, and gemm_tiles' grouped tile order.
//
// Entry point (compiled for sm_90a with -DWEFT_GEMM_WGMMA; on anything else it compiles to a kernel that traps):
//   gemm_wide_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, size_t m, size_t n, size_t k)
// Row-major out (m x n) = a (m x k) * b (k x n), f32 accumulation, rounded once. m a multiple of 128, n of 256, k of
// 32; 256 threads per block, GEMM_WIDE_SMEM bytes of dynamic shared memory, any grid (blocks stride over tiles).
#include <cuda_bf16.h>
#include <stddef.h>
#include <stdint.h>

namespace gemm_wide {

constexpr int BK = 32, STAGES = 3;
constexpr int A_ELEMS = 128 * BK, B_ELEMS = BK * 256, STAGE_ELEMS = A_ELEMS + B_ELEMS;

__device__ __forceinline__ void cp_async_16(void* shared_dst, const void* global_src) {
  uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(__cvta_generic_to_global(global_src)));
}

// Stage <- k-tile kt. A: 128 rows of 4 16-byte chunks, chunk c of row r at c ^ ((r >> 1) & 3) (weft's layout).
// B: eight 32-column atoms of 1024 elements, k-row r of an atom in 32 elements with the same chunk swizzle.
__device__ __forceinline__ void load_stage(__nv_bfloat16* sa, __nv_bfloat16* sb, const __nv_bfloat16* a, size_t lda,
                                           const __nv_bfloat16* b, size_t ldb, size_t kt) {
  uint32_t tid = threadIdx.x;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    uint32_t id = tid + i * 256;
    uint32_t ar = id / 4, ac = id % 4;
    cp_async_16(sa + ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8), a + ar * lda + kt * BK + ac * 8);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    uint32_t id = tid + i * 256;
    uint32_t br = id / 32, bc = id % 32;
    cp_async_16(sb + (bc / 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8),
                b + (kt * BK + br) * ldb + bc * 8);
  }
}

__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  uint64_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(2) << 62);
}

struct Acc {
  float d[128];
};

__device__ __forceinline__ void fence_operands(Acc& acc) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(acc.d[i])::"memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && defined(WEFT_GEMM_WGMMA)
#define GEMM_WIDE_HAS_WGMMA 1
// d (this warpgroup's 64 x 256 f32, this thread's 128 values) += A (64 x 16) x B (16 x 256), B N-major.
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

}  // namespace gemm_wide

// The dynamic shared memory a launch needs: three stages, plus 1 KB to align them to 1024 bytes (the hardware
// swizzles address bits).
#define GEMM_WIDE_SMEM (gemm_wide::STAGES * gemm_wide::STAGE_ELEMS * 2 + 1024)

extern "C" __global__ void __launch_bounds__(256, 1)
    gemm_wide_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* out, size_t m, size_t n, size_t k) {
#if defined(GEMM_WIDE_HAS_WGMMA)
  using namespace gemm_wide;
  extern __shared__ unsigned char smem_raw[];
  // Align the stages to 1024 bytes of the shared window.
  uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  __nv_bfloat16* stages = reinterpret_cast<__nv_bfloat16*>(smem_raw + ((1024 - (base & 1023)) & 1023));
  const size_t group = 8, tiles_m = m / 128, tiles_n = n / 256, tiles = tiles_m * tiles_n, ktiles = k / BK;
  const uint32_t warpgroup = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    size_t first_row = (t / (group * tiles_n)) * group;
    size_t rows = tiles_m - first_row < group ? tiles_m - first_row : group;
    size_t within = t % (group * tiles_n);
    size_t row0 = (first_row + within % rows) * 128, col0 = (within / rows) * 256;
    const __nv_bfloat16* ta = a + row0 * k;
    const __nv_bfloat16* tb = b + col0;
    Acc acc;
#pragma unroll
    for (int i = 0; i < 128; ++i) acc.d[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (size_t(s) < ktiles) load_stage(stages + s * STAGE_ELEMS, stages + s * STAGE_ELEMS + A_ELEMS, ta, k, tb, n, s);
      asm volatile("cp.async.commit_group;");
    }
    for (size_t kt = 0; kt < ktiles; ++kt) {
      asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 2));
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      __syncthreads();
      size_t next = kt + STAGES - 1;
      if (next < ktiles) {
        __nv_bfloat16* s = stages + (next % STAGES) * STAGE_ELEMS;
        load_stage(s, s + A_ELEMS, ta, k, tb, n, next);
      }
      asm volatile("cp.async.commit_group;");
      const __nv_bfloat16* sa = stages + (kt % STAGES) * STAGE_ELEMS + warpgroup * 64 * BK;
      const __nv_bfloat16* sb = stages + (kt % STAGES) * STAGE_ELEMS + A_ELEMS;
      fence_operands(acc);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < BK / 16; ++kk) {
        mma_m64n256k16(acc, desc(sa + kk * 16, 16, 512), desc(sb + kk * 16 * 32, 2048, 512));
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      fence_operands(acc);
    }
    asm volatile("cp.async.wait_group 0;");
    // Fragment f of the warp: columns 8f.., rows lane / 4 (+ 8 for values 2 and 3), columns 2 (lane % 4) (+ 1).
    size_t row = row0 + warpgroup * 64 + warp * 16 + lane / 4;
    size_t col = col0 + (lane % 4) * 2;
#pragma unroll
    for (int f = 0; f < 32; ++f) {
      *reinterpret_cast<__nv_bfloat162*>(out + row * n + col + f * 8) =
          __floats2bfloat162_rn(acc.d[4 * f], acc.d[4 * f + 1]);
      *reinterpret_cast<__nv_bfloat162*>(out + (row + 8) * n + col + f * 8) =
          __floats2bfloat162_rn(acc.d[4 * f + 2], acc.d[4 * f + 3]);
    }
    // The next tile's loads may overwrite the stages once every warp is done with them.
    __syncthreads();
  }
#else
  __trap();
#endif
}
