// The mma.sync ceiling probe of benches/gemm.rs: how many m16n8k16 MMAs (bf16 in, f32 accumulate) a GPU issues
// when nothing else runs. The `mma.sync` GEMM loops are measured against it (docs/gemm.md, "Where the `mma.sync`
// loop really waits"), so that "0.33x cuBLAS" can be read as a share of what the instruction itself can do.
//
// Entry point:
//   mma_peak(unsigned iterations, float* out)
// Every warp keeps 16 accumulators of its own (16 independent chains, so no MMA waits for the previous one's result)
// and issues 16 MMAs per iteration from fragments held in registers; each thread then writes the sum of its
// accumulators to out[thread] (so nothing is optimized away). `out` holds one float per thread of the grid.
#include <stdint.h>

#define CHAINS 16

extern "C" __global__ void mma_peak(unsigned iterations, float* out) {
  uint32_t a[4], b[2];
  for (int i = 0; i < 4; ++i) a[i] = 0x3c003c00u ^ (threadIdx.x * 7 + i);
  for (int i = 0; i < 2; ++i) b[i] = 0x3c003c00u ^ (threadIdx.x * 3 + i);
  float acc[CHAINS][4] = {};
  for (unsigned it = 0; it < iterations; ++it) {
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(acc[c][0]), "+f"(acc[c][1]), "+f"(acc[c][2]), "+f"(acc[c][3])
          : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
  }
  float sum = 0.0f;
  for (int c = 0; c < CHAINS; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  out[size_t(blockIdx.x) * blockDim.x + threadIdx.x] = sum;
}
