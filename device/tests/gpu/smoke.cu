// GPU smoke test of weft.cuh: runs the vocabulary on a real GPU with a one-rank NCCL communicator and checks the
// results. Not part of `cargo test` (the GPU machine has no Rust); run it there with
//
//   source shared/tools/gpu-env.sh
//   nvcc -arch=sm_90 -std=c++17 --extended-lambda --expt-relaxed-constexpr -I device/cuda -I $NCCL_HOME/include \
//        device/tests/gpu/smoke.cu -o /tmp/weft-smoke -L $NCCL_HOME/lib -l:libnccl.so.2 && /tmp/weft-smoke
//
// It prints one line per check and ends with "N passed, M failed" (exit status 1 on any failure). With one rank,
// LSA teams have one member: barriers and reduce-copies run their real code paths but have no peer to wait for, so
// the timeout paths are checked through weft's own primitives (coop-wide result combining, the bounded poll) with
// a signal that never arrives.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "weft.cuh"

#define CHECK_CUDA(x)                                                                          \
  do {                                                                                         \
    cudaError_t e = (x);                                                                       \
    if (e != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e));   \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)
#define CHECK_NCCL(x)                                                                          \
  do {                                                                                         \
    ncclResult_t r = (x);                                                                      \
    if (r != ncclSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r));   \
      std::exit(2);                                                                            \
    }                                                                                          \
  } while (0)

constexpr int kBlocks = 8;
constexpr int kThreads = 256;
constexpr size_t kN = 1 << 16;

// The DESIGN.md kernel, as the macro lowers it.
template <typename T>
__device__ void allreduce_add__body(weft::DevComm const& dev, weft::Window<T> const& x, weft::SliceMut<T> out,
                                    size_t n) {
  auto bar = dev.lsa_barrier(weft::Cta{}, weft::block_idx_x());
  bar.sync(weft::Cta{}, weft::Order::Relaxed);
  for (size_t i = weft::index_1d(); i < (size_t)(n); i += weft::grid_size_1d()) {
    auto acc = weft::zero<T>();
    for (uint32_t peer = 0; peer < dev.lsa_size(); peer++) acc += x.lsa(peer)[i];
    out[i] = acc;
  }
  bar.sync(weft::Cta{}, weft::Order::Release);
}
extern "C" __global__ void allreduce_add__f32(ncclDevComm dev__raw, weft::Window<float> x, weft::SliceMut<float> out,
                                              size_t n) {
  weft::DevComm dev{dev__raw};
  allreduce_add__body<float>(dev, x, out, n);
}

// Barrier sessions: sync, bounded sync/wait, explicit end, then a second session on the same index (its epoch
// must continue from the first's), and a Thread-coop session on another index.
extern "C" __global__ void barrier_lifecycle(ncclDevComm dev__raw, weft::SliceMut<uint32_t> result) {
  weft::DevComm dev{dev__raw};
  uint32_t b = weft::block_idx_x();
  {
    auto bar = dev.lsa_barrier(weft::Cta{}, b);
    bar.sync(weft::Cta{}, weft::Order::AcqRel);
    weft::BarrierResult r1 = bar.sync_timeout(weft::Cta{}, weft::Order::AcqRel, 1000000000ull);
    bar.arrive(weft::Cta{}, weft::Order::Release);
    weft::BarrierResult r2 = bar.wait_timeout(weft::Cta{}, weft::Order::Acquire, 1000000000ull);
    bar.end();
    if (weft::thread_idx_x() == 0) result[4 * b + 0] = uint32_t(r1.code) + 10 * uint32_t(r2.code);
  }
  {
    auto again = dev.lsa_barrier(weft::Cta{}, b);
    again.sync(weft::Cta{}, weft::Order::SeqCst);
    if (weft::thread_idx_x() == 0) result[4 * b + 1] = again.s.epoch;  // 3 syncs before, 1 now
  }
  if (weft::thread_idx_x() == 0) {
    auto single = dev.lsa_barrier(weft::Thread{}, weft::grid_dim_x() + b);
    single.sync(weft::Thread{}, weft::Order::AcqRel);
    result[4 * b + 2] = single.sync_timeout(weft::Thread{}, weft::Order::AcqRel, 1000000).is_ok();
  }
  weft::sync_threads();
  if (weft::warp_id() == 0) {
    auto warp = dev.lsa_barrier(weft::Warp{}, 2 * weft::grid_dim_x() + b);
    warp.sync(weft::Warp{}, weft::Order::AcqRel);
    bool ok = warp.sync_timeout(weft::Warp{}, weft::Order::AcqRel, 1000000).is_ok();
    if (weft::lane_id() == 0) result[4 * b + 3] = ok;
    warp.end();
  }
}

template <class T>
__global__ void reduce_copies(ncclDevComm dev__raw, weft::Window<T> x, weft::Window<T> z, weft::Slice<T> in,
                              weft::SliceMut<T> out, weft::SliceMut<T> scratch, size_t n) {
  weft::DevComm dev{dev__raw};
  // Each block handles its own part, as the vocabulary documents.
  size_t per = n / weft::grid_dim_x(), start = per * weft::block_idx_x();
  weft::Window<T> xb = x.offset(start), zb = z.offset(start);
  weft::SliceMut<T> ob = out.subslice(start, start + per);
  dev.lsa_reduce_sum(weft::Cta{}, xb, ob, per);                 // out = x (one rank)
  dev.lsa_copy(weft::Cta{}, in.subslice(start, start + per), zb, per);  // z = in
  weft::sync_threads();
  // scratch = [in; in] summed -> 2*in, copied twice.
  if (weft::block_idx_x() == 0) {
    weft::local_reduce_sum_copy(weft::Cta{}, in, 2, 0, scratch, 2, n, n);
  }
}

// Execution, numbers, atomics, shared arrays.
extern "C" __global__ void execution(weft::SliceMut<float> f, weft::SliceMut<uint32_t> u, weft::SliceMut<__nv_bfloat16> h,
                                     size_t n) {
  float block_sum = weft::block_reduce_sum(1.0f);
  float block_max = weft::block_reduce_max(float(weft::thread_idx_x()));
  float again = weft::block_reduce_sum(2.0f);  // a second call right after the first
  uint32_t lane_sum = weft::warp_reduce_sum(weft::lane_id());
  uint32_t lane_min = weft::warp_reduce_min(weft::lane_id() + 5);
  uint32_t from_3 = weft::shfl(weft::lane_id(), 3);
  uint32_t xor_1 = weft::shfl_xor(weft::lane_id(), 1);
  __nv_bfloat16 hsum = weft::block_reduce_sum(weft::one<__nv_bfloat16>());
  __shared__ weft::SharedArray<float, kThreads> tile;
  tile[weft::thread_idx_x()] = float(weft::thread_idx_x());
  weft::sync_threads();
  float neighbour = tile[(weft::thread_idx_x() + 1) % tile.len()];
  for (size_t i = weft::index_1d(); i < (size_t)(n); i += weft::grid_size_1d()) weft::atomic_add(u[0], 1u, weft::Scope::Device);
  weft::atomic_add(f[0], 1.0f, weft::Scope::System);
  weft::atomic_max(u[1], weft::thread_idx_x(), weft::Scope::Block);
  weft::atomic_add(h[0], weft::one<__nv_bfloat16>(), weft::Scope::System);
  weft::atomic_add(h[1], weft::one<__nv_bfloat16>(), weft::Scope::Device);
  if (weft::index_1d() == 0) {
    f[1] = block_sum;
    f[2] = block_max;
    f[3] = again;
    f[4] = neighbour;  // tile[1]
    f[5] = weft::to_f32(hsum);
    f[6] = weft::sqrt(16.0f) + weft::fma(2.0f, 3.0f, 1.0f) + weft::to_f32(weft::exp(weft::zero<__half>()));  // 4+7+1
    u[2] = lane_sum;
    u[3] = lane_min;
    u[4] = from_3 + 100 * xor_1;  // 3 + 100*1
  }
}

// weft's timeout machinery with a signal that never arrives, and coop-wide result combining.
template <class Co>
__device__ void combine(Co coop, bool mine, uint32_t* out) {
  weft::BarrierResult r = weft::detail::coop_result(coop, mine, false);
  if (coop.thread_rank() == 0) *out = uint32_t(r.code);
}
extern "C" __global__ void timeouts(weft::SliceMut<uint64_t> out, weft::SliceMut<uint32_t> combined) {
  ncclDevComm none{};
  uint64_t never = 0;
  uint64_t t0 = weft::global_timer_ns();
  weft::BarrierResult timed_out =
      weft::detail::gin_wait_timeout(weft::Cta{}, none, 1, 64, 2000000, [&] { return never; });  // 2 ms
  uint64_t t1 = weft::global_timer_ns();
  weft::BarrierResult ok = weft::detail::gin_wait_timeout(weft::Cta{}, none, 0, 64, 2000000, [&] { return never; });
  if (weft::thread_idx_x() == 0) {
    out[0] = uint64_t(timed_out.code);
    out[1] = t1 - t0;
    out[2] = uint64_t(ok.code);
  }
  // One thread (the last) raises its flag: every coop containing it must see TimedOut.
  bool last = weft::thread_idx_x() == weft::block_dim_x() - 1;
  combine(weft::Cta{}, last, &combined[0]);
  combine(weft::Cta{}, false, &combined[1]);
  if (weft::warp_id() == 7) combine(weft::Warp{}, last, &combined[2]);
  if (weft::warp_id() == 6) combine(weft::Warp{}, last, &combined[3]);  // not in this warp: Ok
  if (weft::warp_id() >= 4) combine(weft::WarpSpan::from_warps(4, 4, 2), last, &combined[4]);
  if (weft::warp_id() == 7 && weft::lane_id() >= 16) combine(weft::Lanes::from_mask(0xffff0000u), last, &combined[5]);  // lanes 16..31
  if (weft::warp_id() == 7 && weft::lane_id() < 16) combine(weft::Lanes::from_mask(0x0000ffffu), last, &combined[6]);
}

static int passed = 0, failed = 0;
template <class A, class B>
static void expect(char const* what, A got, B want) {
  bool ok = got == (A)want;
  std::printf("%s %s: got %.6g, want %.6g\n", ok ? "ok  " : "FAIL", what, double(got), double(want));
  (ok ? passed : failed)++;
}

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, 1, id, 0));
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  std::printf("NCCL %d (headers %d)\n", version, NCCL_VERSION_CODE);

  size_t bytes = kN * sizeof(float);
  float *xbuf, *zbuf;
  CHECK_NCCL(ncclMemAlloc((void**)&xbuf, bytes));
  CHECK_NCCL(ncclMemAlloc((void**)&zbuf, bytes));
  ncclWindow_t xwin, zwin;
  CHECK_NCCL(ncclCommWindowRegister(comm, xbuf, bytes, &xwin, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_NCCL(ncclCommWindowRegister(comm, zbuf, bytes, &zwin, NCCL_WIN_COLL_SYMMETRIC));
  if (xwin == nullptr || zwin == nullptr) {
    std::fprintf(stderr, "window registration returned NULL (no symmetric support)\n");
    return 2;
  }
  ncclDevCommRequirements reqs = {};
#ifdef NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER
  reqs = NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER;
#endif
  reqs.lsaBarrierCount = 3 * kBlocks;
  ncclDevComm dev;
  CHECK_NCCL(ncclDevCommCreate(comm, &reqs, &dev));

  std::vector<float> host(kN);
  for (size_t i = 0; i < kN; i++) host[i] = float(i % 1000) * 0.5f;
  CHECK_CUDA(cudaMemcpy(xbuf, host.data(), bytes, cudaMemcpyHostToDevice));
  float *out, *in, *scratch;
  CHECK_CUDA(cudaMalloc(&out, bytes));
  CHECK_CUDA(cudaMalloc(&in, bytes));
  CHECK_CUDA(cudaMalloc(&scratch, 2 * bytes));
  CHECK_CUDA(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));

  weft::Window<float> x{xwin, 0, kN}, z{zwin, 0, kN};
  // allreduce_add
  CHECK_CUDA(cudaMemset(out, 0, bytes));
  allreduce_add__f32<<<kBlocks, kThreads>>>(dev, x, weft::SliceMut<float>{out, kN}, kN);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> got(kN);
  CHECK_CUDA(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < kN; i++) wrong += got[i] != host[i];
  expect("allreduce_add__f32: out == x on one rank (wrong elements)", wrong, 0);

  // barriers
  uint32_t* res;
  CHECK_CUDA(cudaMalloc(&res, 4 * kBlocks * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(res, 0xff, 4 * kBlocks * sizeof(uint32_t)));
  barrier_lifecycle<<<kBlocks, kThreads>>>(dev, weft::SliceMut<uint32_t>{res, 4 * kBlocks});
  CHECK_CUDA(cudaDeviceSynchronize());
  barrier_lifecycle<<<kBlocks, kThreads>>>(dev, weft::SliceMut<uint32_t>{res, 4 * kBlocks});  // epochs carry over
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint32_t> r(4 * kBlocks);
  CHECK_CUDA(cudaMemcpy(r.data(), res, r.size() * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  expect("lsa barrier: sync_timeout and wait_timeout Ok (block 0)", r[0], 0);
  expect("lsa barrier: sync_timeout and wait_timeout Ok (last block)", r[4 * (kBlocks - 1)], 0);
  // On one rank the epoch counts waits: allreduce_add's 2 on the same index, then per launch 3 in the first session
  // and 1 in the second: 2 + 4 + 4 after the second launch.
  expect("lsa barrier: epoch carried across end() and launches", r[1], 10);
  expect("lsa barrier: Thread coop session", r[2], 1);
  expect("lsa barrier: Warp coop session", r[3], 1);

  // reduce-copies
  CHECK_CUDA(cudaMemset(out, 0, bytes));
  CHECK_CUDA(cudaMemset(zbuf, 0, bytes));
  reduce_copies<float><<<kBlocks, kThreads>>>(dev, x, z, weft::Slice<float>{in, kN}, weft::SliceMut<float>{out, kN},
                                              weft::SliceMut<float>{scratch, 2 * kN}, kN);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> zhost(kN), shost(2 * kN);
  CHECK_CUDA(cudaMemcpy(got.data(), out, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(zhost.data(), zbuf, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(shost.data(), scratch, 2 * bytes, cudaMemcpyDeviceToHost));
  size_t w1 = 0, w2 = 0, w3 = 0;
  for (size_t i = 0; i < kN; i++) {
    w1 += got[i] != host[i];
    w2 += zhost[i] != host[i];
    w3 += (shost[i] != 2 * host[i]) + (shost[kN + i] != 2 * host[i]);
  }
  expect("lsa_reduce_sum (wrong elements)", w1, 0);
  expect("lsa_copy (wrong elements)", w2, 0);
  expect("local_reduce_sum_copy (wrong elements)", w3, 0);

  // execution
  float* f;
  uint32_t* u;
  __nv_bfloat16* h;
  CHECK_CUDA(cudaMalloc(&f, 8 * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&u, 8 * sizeof(uint32_t)));
  CHECK_CUDA(cudaMalloc(&h, 2 * sizeof(__nv_bfloat16)));
  CHECK_CUDA(cudaMemset(f, 0, 8 * sizeof(float)));
  CHECK_CUDA(cudaMemset(u, 0, 8 * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(h, 0, 2 * sizeof(__nv_bfloat16)));
  execution<<<kBlocks, kThreads>>>(weft::SliceMut<float>{f, 8}, weft::SliceMut<uint32_t>{u, 8},
                                   weft::SliceMut<__nv_bfloat16>{h, 2}, 100000);
  CHECK_CUDA(cudaDeviceSynchronize());
  float fh[8];
  uint32_t uh[8];
  __nv_bfloat16 hh[2];
  CHECK_CUDA(cudaMemcpy(fh, f, sizeof fh, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(uh, u, sizeof uh, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hh, h, sizeof hh, cudaMemcpyDeviceToHost));
  expect("grid_stride + atomic_add u32: every index once", uh[0], 100000);
  expect("atomic_add f32 system scope", fh[0], kBlocks * kThreads);
  expect("atomic_max u32 block scope", uh[1], kThreads - 1);
  expect("atomic_add bf16 system scope (CAS loop)", __bfloat162float(hh[0]), 256.0f);  // bf16 stops counting at 256
  expect("atomic_add bf16 device scope", __bfloat162float(hh[1]), 256.0f);
  expect("block_reduce_sum", fh[1], kThreads);
  expect("block_reduce_max", fh[2], kThreads - 1);
  expect("block_reduce_sum called twice in a row", fh[3], 2 * kThreads);
  expect("SharedArray neighbour read", fh[4], 1);
  expect("block_reduce_sum bf16", fh[5], kThreads);
  expect("math: sqrt + fma + exp(half)", fh[6], 12);
  expect("warp_reduce_sum of lane ids", uh[2], 496);
  expect("warp_reduce_min", uh[3], 5);
  expect("shfl + shfl_xor", uh[4], 103);

  // timeouts and combining
  uint64_t* t;
  uint32_t* c;
  CHECK_CUDA(cudaMalloc(&t, 4 * sizeof(uint64_t)));
  CHECK_CUDA(cudaMalloc(&c, 8 * sizeof(uint32_t)));
  CHECK_CUDA(cudaMemset(c, 0xff, 8 * sizeof(uint32_t)));
  timeouts<<<1, kThreads>>>(weft::SliceMut<uint64_t>{t, 4}, weft::SliceMut<uint32_t>{c, 8});
  CHECK_CUDA(cudaDeviceSynchronize());
  uint64_t th[4];
  uint32_t ch[8];
  CHECK_CUDA(cudaMemcpy(th, t, sizeof th, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(ch, c, sizeof ch, cudaMemcpyDeviceToHost));
  expect("bounded wait on a signal that never comes: TimedOut", th[0], 1);
  expect("bounded wait took at least the timeout (2 ms)", th[1] >= 2000000, 1);
  expect("bounded wait took less than 100 ms", th[1] < 100000000, 1);
  expect("bounded wait already satisfied: Ok", th[2], 0);
  expect("coop_any Cta: one thread's flag reaches all", ch[0], 1);
  expect("coop_any Cta: no flag", ch[1], 0);
  expect("coop_any Warp: flag in this warp", ch[2], 1);
  expect("coop_any Warp: flag in another warp", ch[3], 0);
  expect("coop_any WarpSpan (barrier.red.or)", ch[4], 1);
  expect("coop_any Lanes containing the flag", ch[5], 1);
  expect("coop_any Lanes without the flag", ch[6], 0);

  CHECK_NCCL(ncclDevCommDestroy(comm, &dev));
  CHECK_NCCL(ncclCommWindowDeregister(comm, xwin));
  CHECK_NCCL(ncclCommWindowDeregister(comm, zwin));
  CHECK_NCCL(ncclMemFree(xbuf));
  CHECK_NCCL(ncclMemFree(zbuf));
  CHECK_NCCL(ncclCommDestroy(comm));
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
