// Exercises every item of weft.cuh, the way #[weft::kernel] output uses them (docs/vocabulary.md), so that
// device/tests/header.rs can compile it to an sm_90 cubin against every supported NCCL's headers. Nothing here
// runs; it is a compile test. Items that need NCCL 2.32 are used under `#if WEFT_NCCL_2_32`, and
// unavailable.cu checks that using them with older headers fails with weft's message.
#include "weft.cuh"

// --- Execution, numbers, atomics, shared memory: generic over the element types -------------------------------

template <class T>
__device__ void numbers_body(weft::Slice<T> x, weft::SliceMut<T> y) {
  T a = weft::zero<T>();
  T b = weft::one<T>();
  T c = weft::from_f32<T>(2.5f);
  float f = weft::to_f32(c);
  a += b;
  a = a * c - b / c;
  a = weft::sqrt(a) + weft::rsqrt(b) + weft::exp(c) + weft::log(b) + weft::ln(b) + weft::tanh(a) + weft::abs(c);
  a = weft::fma(a, b, c) + weft::mul_add(a, b, c);
  a = weft::min(a, b) + weft::max(a, c);
  if (x.len() > 0 && !x.is_empty() && y.len() > 0 && !y.is_empty()) y[0] = x[0] + a + weft::from_f32<T>(f);
  y.subslice(0, 1)[0] = x.subslice(0, 1)[0];
  weft::Slice<T> ro = y;  // &mut [T] -> &[T]
  y[0] = ro[0] + *x.as_ptr() + *y.as_ptr();
}

template <class T>
__device__ void shuffles_body(weft::SliceMut<T> y) {
  T v = y[weft::index_1d()];
  v = weft::shfl(v, 0) + weft::shfl_xor(v, 1) + weft::shfl_down(v, 2) + weft::shfl_up(v, 3);
  v = weft::warp_reduce_sum(v) + weft::warp_reduce_max(v) + weft::warp_reduce_min(v);
  v = weft::block_reduce_sum(v) + weft::block_reduce_max(v) + weft::block_reduce_min(v);
  y[weft::index_1d()] = v;
}

template <class T>
__device__ void atomics_add_body(weft::SliceMut<T> y, T v) {
  T old = weft::atomic_add(y[0], v, weft::Scope::Thread) + weft::atomic_add(y[0], v, weft::Scope::Block) +
          weft::atomic_add(y[0], v, weft::Scope::Device) + weft::atomic_add(&y[0], v, weft::Scope::System);
  y[1] = old;
}

template <class T>
__device__ void atomics_bits_body(weft::SliceMut<T> y, T v) {
  T old = weft::atomic_exch(y[0], v, weft::Scope::Device) + weft::atomic_cas(y[0], v, v, weft::Scope::System) +
          weft::atomic_load(y[0], weft::Order::Acquire, weft::Scope::System);
  weft::atomic_store(y[1], old, weft::Order::Release, weft::Scope::Device);
  weft::atomic_store(&y[1], old, weft::Order::SeqCst, weft::Scope::Block);
  old = weft::atomic_exch(&y[0], v, weft::Scope::Thread) + weft::atomic_cas(&y[0], v, v, weft::Scope::Block) +
        weft::atomic_load(&y[0], weft::Order::Relaxed, weft::Scope::Thread);
  y[2] = old;
}

template <class T>
__device__ void atomics_minmax_body(weft::SliceMut<T> y, T v) {
  y[1] = weft::atomic_max(y[0], v, weft::Scope::Device) + weft::atomic_min(&y[0], v, weft::Scope::System) +
         weft::atomic_max(&y[0], 1, weft::Scope::Block) + weft::atomic_min(y[0], 1, weft::Scope::Thread);
}

template <class T>
__global__ void numbers(weft::Slice<T> x, weft::SliceMut<T> y) {
  numbers_body(x, y);
  shuffles_body(y);
  atomics_add_body(y, x[0]);
}
template __global__ void numbers<float>(weft::Slice<float>, weft::SliceMut<float>);
template __global__ void numbers<double>(weft::Slice<double>, weft::SliceMut<double>);
template __global__ void numbers<__half>(weft::Slice<__half>, weft::SliceMut<__half>);
template __global__ void numbers<__nv_bfloat16>(weft::Slice<__nv_bfloat16>, weft::SliceMut<__nv_bfloat16>);

template <class T>
__global__ void integers(weft::Slice<T> x, weft::SliceMut<T> y) {
  T a = weft::zero<T>() + weft::one<T>();
  y[0] = weft::min(a, x[0]) + weft::max(a, x[0]);
  shuffles_body(y);
  atomics_add_body(y, x[0]);
  atomics_bits_body(y, x[0]);
  atomics_minmax_body(y, x[0]);
}
template __global__ void integers<int32_t>(weft::Slice<int32_t>, weft::SliceMut<int32_t>);
template __global__ void integers<uint32_t>(weft::Slice<uint32_t>, weft::SliceMut<uint32_t>);
template __global__ void integers<int64_t>(weft::Slice<int64_t>, weft::SliceMut<int64_t>);
template __global__ void integers<uint64_t>(weft::Slice<uint64_t>, weft::SliceMut<uint64_t>);

extern "C" __global__ void float_atomics(weft::SliceMut<float> f, weft::SliceMut<double> d, weft::SliceMut<int8_t> b,
                                         weft::Slice<uint8_t> u, weft::Slice<size_t> s, weft::Slice<ptrdiff_t> p,
                                         weft::Slice<bool> flags) {
  atomics_bits_body(f, 1.0f);
  atomics_bits_body(d, 1.0);
  b[0] = int8_t(u[0] + s[0] + p[0] + flags[0]) + weft::abs(b[1]);
}

extern "C" __global__ void execution(weft::SliceMut<uint32_t> out, size_t n) {
  uint32_t v = weft::thread_idx_x() + weft::thread_idx_y() + weft::thread_idx_z() + weft::block_idx_x() +
               weft::block_idx_y() + weft::block_idx_z() + weft::block_dim_x() + weft::block_dim_y() +
               weft::block_dim_z() + weft::grid_dim_x() + weft::grid_dim_y() + weft::grid_dim_z() +
               weft::lane_id() + weft::warp_id() + weft::WARP_SIZE;
  // Rule R11, and the range form.
  for (size_t i = weft::index_1d(); i < (size_t)(n); i += weft::grid_size_1d()) out[i] = v;
  for (size_t i : weft::grid_stride(n)) out[i] += 1;
  weft::sync_threads();
  weft::sync_warp();
  weft::threadfence();
  weft::threadfence_block();
  weft::threadfence_system();
  weft::atomic_fence(weft::Order::AcqRel, weft::Scope::System);
  weft::atomic_fence(weft::Order::Acquire, weft::Scope::Thread);
  weft::atomic_fence(weft::Order::Release, weft::Scope::Block);
  weft::atomic_fence(weft::Order::Relaxed, weft::Scope::Device);
  out[0] = uint32_t(weft::global_timer_ns());
  // Rule R12.
  __shared__ weft::SharedArray<float, 256> tile;
  __shared__ weft::SharedArray<__nv_bfloat16, 64> tile16;
  tile[weft::thread_idx_x()] = 1.0f;
  tile16[0] = weft::from_f32<__nv_bfloat16>(tile[0]);
  weft::sync_threads();
  weft::Slice<float> ts = tile.as_slice();
  weft::SliceMut<float> tm = tile.as_mut_slice();
  tm[1] = ts[0] + float(tile.len()) + float(tile.is_empty());
}

// --- Coops, teams, windows, LSA barriers: the first end-to-end LSA all-reduce -------------------------------------

template <class Co>
__device__ void coop_body(Co coop, weft::SliceMut<uint32_t> out) {
  out[0] = coop.thread_rank() + coop.size();
  coop.sync();
}

extern "C" __global__ void coops(weft::SliceMut<uint32_t> out) {
  coop_body(weft::Thread{}, out);
  coop_body(weft::Warp{}, out);
  coop_body(weft::Cta{}, out);
  coop_body(weft::Lanes::from_mask(0xffu), out);
  coop_body(weft::Lanes::coalesced(), out);
  coop_body(weft::WarpSpan::from_warps(0, 2, 1), out);
  weft::WarpSpan span = weft::WarpSpan::from_warps(1, 2, 3);
  out[1] = weft::Lanes::from_mask(3).mask() + span.first_warp() + span.warp_count() + span.id();
}

// The kernel of DESIGN.md, as the macro lowers it (rules R1, R6, R8, R9, R11).
template <typename T>
__device__ void rs_allreduce_add__body(weft::DevComm const& dev, weft::Window<T> const& x, weft::SliceMut<T> out,
                                    size_t n) {
  auto bar = dev.lsa_barrier(weft::Cta{}, weft::block_idx_x());
  bar.sync(weft::Cta{}, weft::Order::Relaxed);
  for (size_t i = weft::index_1d(); i < (size_t)(n); i += weft::grid_size_1d()) {
    auto acc = weft::zero<T>();
    for (uint32_t peer = 0; peer < dev.lsa_size(); peer++) {
      acc += x.lsa(peer)[i];
    }
    out[i] = acc;
  }
  bar.sync(weft::Cta{}, weft::Order::Release);
}
extern "C" __global__ void rs_allreduce_add__f32(ncclDevComm dev__raw, weft::Window<float> x, weft::SliceMut<float> out,
                                              size_t n) {
  weft::DevComm dev{dev__raw};
  rs_allreduce_add__body<float>(dev, x, out, n);
}
extern "C" __global__ void rs_allreduce_add__bf16(ncclDevComm dev__raw, weft::Window<__nv_bfloat16> x,
                                               weft::SliceMut<__nv_bfloat16> out, size_t n) {
  weft::DevComm dev{dev__raw};
  rs_allreduce_add__body<__nv_bfloat16>(dev, x, out, n);
}

extern "C" __global__ void comm_and_windows(ncclDevComm dev__raw, weft::Window<float> x, weft::SliceMut<uint32_t> out) {
  weft::DevComm dev{dev__raw};
  weft::Team world = dev.world(), lsa = dev.lsa(), rail = dev.rail();
  out[0] = dev.rank() + dev.nranks() + dev.lsa_rank() + dev.lsa_size() + world.nranks + lsa.rank + rail.stride;
  out[1] = dev.team_rank_to_world(lsa, 0) + dev.team_rank_to_lsa(world, dev.rank());
  out[2] = uint32_t(world.contains(lsa, 0)) + world.rank_from(lsa, 0) + world.inner_factor(1).nranks +
           world.outer_factor(1).nranks;
  weft::Team t{1, 0, 1};
  weft::Window<float> part = x.offset(16);
  weft::View<float> local = part.local();
  local[0] = x.lsa(0)[1] + x.peer(t, 0)[2] + float(part.len() + x.is_empty() + local.len() + local.is_empty());
  x.lsa(0)[3] = *local.as_ptr();
  out[3] = uint32_t(dev.raw().rank);
}

template <class Co>
__device__ void lsa_barrier_body(weft::DevComm const& dev, Co coop, weft::SliceMut<uint32_t> out) {
  auto bar = dev.lsa_barrier(coop, weft::block_idx_x());
  bar.arrive(coop, weft::Order::Release);
  bar.wait(coop, weft::Order::Acquire);
  bar.sync(coop, weft::Order::AcqRel);
  bar.sync(coop, weft::Order::SeqCst);
  weft::BarrierResult r = bar.sync_timeout(coop, weft::Order::Relaxed, 1000000);
  if (r == weft::BarrierResult::TimedOut) r = bar.wait_timeout(coop, weft::Order::Acquire, 1000000);
  switch (r) {
    case weft::BarrierResult::Ok: out[0] = 0; break;
    case weft::BarrierResult::TimedOut: out[0] = 1; break;
    case weft::BarrierResult::Aborted: out[0] = 2; break;
  }
  out[1] = r.is_ok() + r.is_timed_out() + r.is_aborted();
  bar.end();
  auto mm = dev.lsa_multimem_barrier(coop, weft::block_idx_x());
  mm.sync(coop, weft::Order::Release);
  out[2] = mm.sync_timeout(coop, weft::Order::AcqRel, 5).is_ok();
}

extern "C" __global__ void lsa_barriers(ncclDevComm dev__raw, weft::SliceMut<uint32_t> out) {
  weft::DevComm dev{dev__raw};
  lsa_barrier_body(dev, weft::Cta{}, out);
  lsa_barrier_body(dev, weft::Warp{}, out);
  lsa_barrier_body(dev, weft::Thread{}, out);
  lsa_barrier_body(dev, weft::Lanes::from_mask(0xffffffffu), out);
  lsa_barrier_body(dev, weft::WarpSpan::from_warps(0, 1, 0), out);
}

// --- Reduce-copy ---------------------------------------------------------------------------------------------------

template <class T, class Co>
__device__ void reduce_copy_body(weft::DevComm const& dev, Co coop, weft::Window<T> const& x, weft::Window<T> const& z,
                                 weft::Slice<T> in, weft::SliceMut<T> out, size_t n) {
  dev.lsa_reduce_sum(coop, x, out, n);
  dev.lsa_copy(coop, in, x.offset(n), n);
  dev.lsa_reduce_sum_copy(coop, x, z, n);
  weft::local_reduce_sum(coop, in, 4, n, out, n);
  weft::local_copy(coop, in, out, 4, n, n);
  weft::local_reduce_sum_copy(coop, in, 4, n, out, 2, n, n);
}

template <class T>
__global__ void reduce_copy(ncclDevComm dev__raw, weft::Window<T> x, weft::Window<T> z, weft::Slice<T> in,
                            weft::SliceMut<T> out, size_t n) {
  weft::DevComm dev{dev__raw};
  reduce_copy_body(dev, weft::Cta{}, x, z, in, out, n);
}
// Other coops take the same code path; one type is enough for them (NCCL's 2.32 helpers are slow to compile).
extern "C" __global__ void reduce_copy_warp(ncclDevComm dev__raw, weft::Window<float> x, weft::Window<float> z,
                                            weft::Slice<float> in, weft::SliceMut<float> out, size_t n) {
  weft::DevComm dev{dev__raw};
  reduce_copy_body(dev, weft::Warp{}, x, z, in, out, n);
}
#define REDUCE_COPY(T)                                                                                   \
  template __global__ void reduce_copy<T>(ncclDevComm, weft::Window<T>, weft::Window<T>, weft::Slice<T>, \
                                          weft::SliceMut<T>, size_t);
REDUCE_COPY(float)
REDUCE_COPY(double)
REDUCE_COPY(__half)
REDUCE_COPY(__nv_bfloat16)
REDUCE_COPY(int8_t)

// Integer types: the functions whose NCCL code differs most by type (2.32's helpers are slow to compile).
template <class T>
__global__ void reduce_copy_int(ncclDevComm dev__raw, weft::Window<T> x, weft::Window<T> z, weft::Slice<T> in,
                                weft::SliceMut<T> out, size_t n) {
  weft::DevComm dev{dev__raw};
  dev.lsa_reduce_sum_copy(weft::Cta{}, x, z, n);
  weft::local_reduce_sum_copy(weft::Cta{}, in, 4, n, out, 2, n, n);
}
#define REDUCE_COPY_INT(T)                                                                                   \
  template __global__ void reduce_copy_int<T>(ncclDevComm, weft::Window<T>, weft::Window<T>, weft::Slice<T>, \
                                              weft::SliceMut<T>, size_t);
REDUCE_COPY_INT(int32_t)
REDUCE_COPY_INT(uint32_t)
REDUCE_COPY_INT(int64_t)
REDUCE_COPY_INT(uint64_t)
REDUCE_COPY_INT(uint8_t)

// --- GIN -------------------------------------------------------------------------------------------------------------
// One kernel per group: ptxas time grows faster than linearly with kernel size, and every GIN call inlines the
// network backends' code.

template <class Co>
__device__ void gin_put_body(weft::GinSession const& gin, weft::Team rail, Co coop, weft::Window<float> const& x,
                             weft::Window<uint64_t> const& sig) {
  gin.put(rail, 1, x, x.offset(8), 8, weft::NoAction{}, weft::NoAction{}, coop);
  gin.put(rail, 1, x, x, 8, weft::SignalInc(0), weft::CounterInc(1), coop);
  gin.put(rail, 1, x, x, 8, weft::SignalAdd(2, 5), weft::NoAction{}, coop);
  gin.put_value(rail, 1, x, 1.5f, weft::SignalInc(0), coop);
  gin.put_value(rail, 1, sig, 7, weft::NoAction{}, coop);
  gin.signal(rail, 1, weft::SignalAdd(1, 3), coop);
  gin.flush(coop, weft::Order::Acquire);
}

extern "C" __global__ void gin_puts(ncclDevComm dev__raw, weft::Window<float> x, weft::Window<uint64_t> sig) {
  weft::DevComm dev{dev__raw};
  auto gin = dev.gin(weft::block_idx_x());
  gin_put_body(gin, dev.rail(), weft::Cta{}, x, sig);
}
extern "C" __global__ void gin_put_warp(ncclDevComm dev__raw, weft::Window<float> x) {
  weft::DevComm dev{dev__raw};
  dev.gin(0).put(dev.rail(), 1, x, x, 8, weft::SignalInc(0), weft::CounterInc(1), weft::Warp{});
}
extern "C" __global__ void gin_put_thread(ncclDevComm dev__raw, weft::Window<float> x) {
  weft::DevComm dev{dev__raw};
  dev.gin(0).put(dev.rail(), 1, x, x, 8, weft::SignalInc(0), weft::CounterInc(1), weft::Thread{});
}

template <class Co>
__device__ void gin_wait_body(weft::GinSession const& gin, Co coop, weft::SliceMut<uint64_t> out) {
  out[0] = gin.read_signal(0) + gin.read_counter(1) + gin.signal_shadow(0);
  gin.wait_signal(coop, 0, 1);
  gin.wait_counter(coop, 1, 1);
  gin.increase_signal_shadow(0, 1);
  gin.wait_signal_meet_shadow(coop, 0);
  weft::BarrierResult r = gin.wait_signal_timeout(coop, 0, 2, 1000);
  weft::BarrierResult c = gin.wait_counter_timeout(coop, 1, 2, 1000);
  out[1] = r.is_ok() + c.is_timed_out();
  gin.reset_signal(0);
  gin.reset_counter(1);
}

extern "C" __global__ void gin_waits(ncclDevComm dev__raw, weft::SliceMut<uint64_t> out) {
  weft::DevComm dev{dev__raw};
  auto gin = dev.gin(weft::block_idx_x());
  gin_wait_body(gin, weft::Cta{}, out);
  gin_wait_body(gin, weft::Warp{}, out);
  gin_wait_body(gin, weft::Thread{}, out);
}

template <class Co>
__device__ void gin_barrier_body(weft::DevComm const& dev, Co coop, weft::SliceMut<uint64_t> out) {
  auto gin = dev.gin(weft::block_idx_x());
  auto gbar = gin.rail_barrier(coop, weft::block_idx_x());
  gbar.sync(coop, weft::Order::Release);
  out[3] = gbar.sync_timeout(coop, weft::Order::AcqRel, 1000000).is_ok();
  gbar.end();
  auto hbar = dev.hybrid_barrier(coop, gin, weft::block_idx_x());
  hbar.sync(coop, weft::Order::AcqRel);
  hbar.end();
}

extern "C" __global__ void gin_barriers(ncclDevComm dev__raw, weft::SliceMut<uint64_t> out) {
  weft::DevComm dev{dev__raw};
  gin_barrier_body(dev, weft::Cta{}, out);
}
extern "C" __global__ void gin_barriers_warp(ncclDevComm dev__raw, weft::SliceMut<uint64_t> out) {
  weft::DevComm dev{dev__raw};
  gin_barrier_body(dev, weft::Warp{}, out);
}

#if WEFT_NCCL_2_32
extern "C" __global__ void gin_2_32_actions(ncclDevComm dev__raw, weft::Window<float> x, weft::Window<uint64_t> sig) {
  weft::DevComm dev{dev__raw};
  auto gin = dev.gin(0);
  weft::Team rail = dev.rail();
  weft::Cta coop;
  gin.put(rail, 1, x, x, 8, weft::StrongSignalInc(0), weft::WeakCounterInc(1), coop);
  gin.put(rail, 1, x, x, 8, weft::WeakSignalInc(0), weft::NoAction{}, coop);
  gin.put(rail, 1, x, x, 8, weft::StrongSignalAdd(0, 2), weft::NoAction{}, coop);
  gin.put(rail, 1, x, x, 8, weft::WeakSignalAdd(0, 2), weft::NoAction{}, coop);
  gin.put(rail, 1, x, x, 8, weft::VaSignalInc(sig), weft::NoAction{}, coop);
  gin.put(rail, 1, x, x, 8, weft::VaSignalAdd(sig, 2), weft::NoAction{}, coop);
}
extern "C" __global__ void gin_2_32_signals(ncclDevComm dev__raw, weft::Window<float> x, weft::Window<uint64_t> sig,
                                            weft::SliceMut<uint64_t> out) {
  weft::DevComm dev{dev__raw};
  auto gin = dev.gin(0);
  weft::Team rail = dev.rail();
  weft::Cta coop;
  gin.signal(rail, 1, weft::StrongVaSignalInc(&sig), coop);
  gin.signal(rail, 1, weft::WeakVaSignalInc(sig), coop);
  gin.signal(rail, 1, weft::StrongVaSignalAdd(sig, 4), coop);
  gin.signal(rail, 1, weft::WeakVaSignalAdd(&sig, 4), coop);
  gin.get(rail, 1, x, x.offset(4), 4, coop);
  out[2] = gin.read_va_signal(sig);
  gin.wait_va_signal(coop, sig, 1);
  gin.reset_va_signal(sig);
  auto world = gin.world_barrier(coop, 0);
  world.sync(coop, weft::Order::AcqRel);
  out[3] = world.sync_timeout(coop, weft::Order::AcqRel, 1000).is_ok();
  world.end();
}
#endif

// --- LL all-to-all and multimem ---------------------------------------------------------------------------------------

template <class Co>
__device__ void ll_a2a_body(weft::DevComm const& dev, Co coop, weft::LlA2aHandle h, weft::SliceMut<float> out) {
  auto a2a = dev.ll_a2a(coop, h, weft::block_idx_x(), 4);
  a2a.send(0, weft::thread_idx_x(), 1.0f);
  a2a.send(0, 1, uint64_t(3));
  a2a.broadcast(2, __float2bfloat16_rn(1.0f));
  out[0] = a2a.template recv<float>(weft::thread_idx_x()) + float(a2a.template recv<uint64_t>(1));
  out[1] = float(h.slots() + h.buffer() + a2a.team_size());
  out[2] = float(weft::detail::resource_at(weft::thread_idx_x(), a2a.team_size(), 7));
  a2a.end_epoch(coop);
  a2a.end();
}

extern "C" __global__ void ll_a2a(ncclDevComm dev__raw, weft::LlA2aHandle h, weft::SliceMut<float> out) {
  weft::DevComm dev{dev__raw};
  ll_a2a_body(dev, weft::Cta{}, h, out);
  ll_a2a_body(dev, weft::Warp{}, h, out);
}

template <class T>
__global__ void multimem_view(ncclDevComm dev__raw, weft::Window<T> x, weft::SliceMut<T> out) {
  weft::DevComm dev{dev__raw};
  auto mv = dev.lsa_multimem(x);
  out[0] = mv.load_reduce_sum(weft::index_1d());
  mv.reduce_add(1, out[0]);
  out[1] = out[1] + weft::from_f32<T>(float(mv.len() + mv.is_empty()));
  dev.multimem_reduce_sum(weft::Cta{}, x, out, 64);
}
template __global__ void multimem_view<float>(ncclDevComm, weft::Window<float>, weft::SliceMut<float>);
template __global__ void multimem_view<double>(ncclDevComm, weft::Window<double>, weft::SliceMut<double>);
template __global__ void multimem_view<__half>(ncclDevComm, weft::Window<__half>, weft::SliceMut<__half>);
template __global__ void multimem_view<__nv_bfloat16>(ncclDevComm, weft::Window<__nv_bfloat16>,
                                                      weft::SliceMut<__nv_bfloat16>);

template <class T>
__global__ void multimem_store(ncclDevComm dev__raw, weft::Window<T> x, weft::Window<T> z, weft::Slice<T> in) {
  weft::DevComm dev{dev__raw};
  auto mv = dev.lsa_multimem(x);
  mv.store(0, in[0]);
  mv.reduce_add(0, in[0]);
  dev.multimem_copy(weft::Warp{}, in, x, 64);
  dev.multimem_reduce_sum_copy(weft::Cta{}, x, z, 64);
}
template __global__ void multimem_store<float>(ncclDevComm, weft::Window<float>, weft::Window<float>, weft::Slice<float>);
template __global__ void multimem_store<double>(ncclDevComm, weft::Window<double>, weft::Window<double>,
                                                weft::Slice<double>);

extern "C" __global__ void multimem_integers(ncclDevComm dev__raw, weft::Window<int32_t> a, weft::Window<uint32_t> b,
                                             weft::Window<uint64_t> c, weft::SliceMut<uint64_t> out) {
  weft::DevComm dev{dev__raw};
  auto ma = dev.lsa_multimem(a);
  auto mb = dev.lsa_multimem(b);
  auto mc = dev.lsa_multimem(c);
  ma.store(0, 1);
  mb.store(0, 1u);
  mc.store(0, 1ull);
  ma.reduce_add(0, 1);
  mb.reduce_add(0, 1u);
  mc.reduce_add(0, 1ull);
  out[0] = ma.load_reduce_sum(0) + mb.load_reduce_sum(0) + mc.load_reduce_sum(0);
  dev.multimem_reduce_sum(weft::Cta{}, c, out, 8);
  dev.multimem_copy(weft::Cta{}, weft::Slice<uint64_t>(out), c, 8);
  dev.multimem_reduce_sum_copy(weft::Cta{}, c, c, 8);
}

#if WEFT_NCCL_2_32
// 16-bit multimem copies go through NCCL's pair-wise helpers (2.32+).
extern "C" __global__ void multimem_half_copy(ncclDevComm dev__raw, weft::Window<__nv_bfloat16> x,
                                              weft::Slice<__nv_bfloat16> in) {
  weft::DevComm dev{dev__raw};
  dev.multimem_copy(weft::Cta{}, in, x, 64);
  dev.multimem_reduce_sum_copy(weft::Cta{}, x, x, 64);
}
#endif

// Tensor cores: fragments from a slice, a view and a shared array; the accumulator into a slice and shared memory.
template <class T>
__global__ void mma_tiles(weft::Window<T> w, weft::Slice<T> a, weft::SliceMut<float> out) {
  __shared__ weft::SharedArray<T, 256> tile;
  __shared__ weft::SharedArray<float, 128> result;
  weft::MmaAcc acc = weft::MmaAcc::zero();
  acc = weft::mma(weft::detail::mma_load_a_at(a, 0, 0, 16, 1), weft::detail::mma_load_b_at(w.local(), 0, 0, 8, 2), acc);
  acc = weft::mma(weft::detail::mma_load_a_at(tile, 0, 0, 16, 3), weft::detail::mma_load_b_at(tile, 0, 8, 16, 4), acc);
  acc = weft::mma(weft::detail::mma_ldmatrix_a_at(tile, 0, 0, 16, 7), weft::detail::mma_ldmatrix_b_at(tile, 0, 8, 16, 8), acc);
  weft::detail::mma_store_at(out, acc, 0, 0, 8, 5);
  weft::detail::mma_store_at(result, acc, 0, 0, 8, 6);
  out[0] = result[0];
}
template __global__ void mma_tiles<__half>(weft::Window<__half>, weft::Slice<__half>, weft::SliceMut<float>);
template __global__ void mma_tiles<__nv_bfloat16>(weft::Window<__nv_bfloat16>, weft::Slice<__nv_bfloat16>,
                                                  weft::SliceMut<float>);

// Programmatic dependent launch.
__global__ void pdl(weft::SliceMut<uint32_t> out) {
  weft::pdl_wait();
  out[0] = 1;
  weft::pdl_launch_dependents();
}

// 16-byte packs: loads and stores on slices and window views, arithmetic in float.
template <class T>
__global__ void packs(ncclDevComm dev__raw, weft::Window<T> w, weft::Slice<T> x, weft::SliceMut<T> y) {
  weft::DevComm dev{dev__raw};
  size_t lanes = weft::pack_lanes<T>();
  static_assert(sizeof(weft::Pack<T>) == 16, "a pack is 16 bytes");
  auto a = x.load_pack(0).widen();
  auto b = w.lsa(dev.lsa_rank()).load_pack(1).widen();
  a += b;
  a *= 2.0f;
  auto c = weft::sqrt((a - b) / b) * 0.5f + weft::WidePack<T>::splat(1.0f);
  c = weft::mul_add(weft::rsqrt(c), a, b);
  c = 2.0f * c + (1.0f - c) / (3.0f + c) - 0.5f * c;
  c = 2.0 * c + 1.0;  // untyped Rust float literals reach C++ as double
  y.store_pack(0, c.narrow());
  w.local().store_pack(1, weft::Pack<T>::splat(x.load_pack(2).lane(0)));
  y[lanes] = weft::from_f32<T>(c.lane_sum() + c.lane(1));
  y.store_pack(3, y.load_pack(2));
  // Lamport packs: push to a peer, poll with a deadline, clear; their checked forms (macro-generated calls).
  w.lsa(0).lamport_store_pack(4, x.load_pack(4));
  auto polled = w.local().lamport_wait_pack(4, weft::global_timer_ns() + 1000);
  if (!polled.lamport_ready()) y[0] = weft::from_f32<T>(1.0f);
  w.local().lamport_clear_pack(4);
  weft::detail::lamport_store_pack_at(w.lsa(0), 5, polled, 1);
  y.store_pack(5, weft::detail::lamport_wait_pack_at(w.local(), 5, weft::global_timer_ns() + 1000, 2));
  weft::detail::lamport_clear_pack_at(w.local(), 5, 3);
}
template __global__ void packs<float>(ncclDevComm, weft::Window<float>, weft::Slice<float>, weft::SliceMut<float>);
template __global__ void packs<double>(ncclDevComm, weft::Window<double>, weft::Slice<double>,
                                       weft::SliceMut<double>);
template __global__ void packs<__half>(ncclDevComm, weft::Window<__half>, weft::Slice<__half>,
                                       weft::SliceMut<__half>);
template __global__ void packs<__nv_bfloat16>(ncclDevComm, weft::Window<__nv_bfloat16>, weft::Slice<__nv_bfloat16>,
                                              weft::SliceMut<__nv_bfloat16>);

// f32 lanes of another type's pack (mixed precision).
template <class T>
__global__ void wide_lanes(weft::Slice<float> master, weft::SliceMut<float> moments, weft::SliceMut<T> params) {
  auto w = master.template load_wide<T>(1) + moments.template load_wide<T>(0);
  moments.store_wide(1, w);
  params.store_pack(0, w.narrow());
}
template __global__ void wide_lanes<float>(weft::Slice<float>, weft::SliceMut<float>, weft::SliceMut<float>);
template __global__ void wide_lanes<__nv_bfloat16>(weft::Slice<float>, weft::SliceMut<float>,
                                                   weft::SliceMut<__nv_bfloat16>);
template __global__ void wide_lanes<double>(weft::Slice<float>, weft::SliceMut<float>, weft::SliceMut<double>);
