// Keeps the GPU busy for `ns` nanoseconds of its global timer, so that the host can enqueue a whole batch of
// timed runs before the GPU reaches the first: the CUDA events around each run then measure the GPU's time
// for the run, not the host's launch latency (benches/fused/harness.rs).
extern "C" __global__ void weft_bench_spin(unsigned long long ns) {
  unsigned long long start;
  unsigned long long now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
