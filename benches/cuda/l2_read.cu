// The L2 -> SM read bandwidth probe of benches/gemm.rs: how fast the multiprocessors can stream a buffer that
// stays in L2. A block GEMM's operand tiles come from L2 (each is read by many blocks), so this bandwidth times
// the tile's arithmetic intensity bounds its throughput (docs/gemm.md, "What bounds a 128 x 128 tile").
//
// Entry point:
//   l2_read(const uint4* x, size_t n, unsigned passes, unsigned* out)
// Every thread reads 16-byte vectors i = tid, tid + threads, ... < n, `passes` times over, through L2 only
// (ld.global.cg: not cached in L1, so the second pass is not served by L1), and XORs them into one word that it
// writes to out[tid] (so nothing is optimized away). `out` holds one word per thread of the grid.
#include <stddef.h>
#include <stdint.h>

extern "C" __global__ void l2_read(const uint4* x, size_t n, unsigned passes, unsigned* out) {
  size_t tid = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t threads = size_t(gridDim.x) * blockDim.x;
  unsigned acc = 0;
  for (unsigned p = 0; p < passes; ++p) {
#pragma unroll 4
    for (size_t i = tid; i < n; i += threads) {
      uint4 v = __ldcg(x + i);
      acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
  }
  out[tid] = acc;
}
