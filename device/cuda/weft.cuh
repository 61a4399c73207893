// weft.cuh — the CUDA C++ side of weft's kernel vocabulary.
//
// Every item here mirrors, under the same name in namespace `weft`, an item of the Rust crate `weft-device`
// (device/src). `#[weft::kernel]` translates kernel bodies into calls of these names; docs/vocabulary.md is the
// dictionary and lists the few rules where the translation is not a plain name copy. Keep the three in step: the
// test device/tests/header.rs compiles a translation unit that uses every item, against every supported NCCL.
//
// Supported NCCL device headers: 2.28.x and 2.32.x (tested: 2.28.9, 2.32.3). Items that need 2.32 are declared
// with every version; with older headers using them is a static_assert naming the version, raised only when the
// item is instantiated.
//
// Compile with nvcc: -std=c++17 --extended-lambda --expt-relaxed-constexpr, sm_90 or newer.
//
// One file on purpose: the JIT writes this text (weft_device::WEFT_CUH) next to each generated source, so the
// vocabulary must not depend on sibling headers. Sections follow the Rust modules.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include <cuda/atomic>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <nccl_device.h>

#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < 22800
#error "weft.cuh needs the NCCL device API headers of NCCL 2.28.9 or newer (nccl_device.h)"
#endif
// 2.28.3's device API (mem_barrier.h, no GIN) predates the one weft is written against.
#if defined(__has_include)
#if !__has_include(<nccl_device/lsa_barrier.h>) || !__has_include(<nccl_device/gin.h>)
#error "weft.cuh needs NCCL 2.28.9 or newer device headers (these lack nccl_device/lsa_barrier.h or gin.h: NCCL 2.28.3's /usr/include on the GPU machine is one such; use the pip wheel's include/)"
#endif
#endif

// Feature switch: 2.32 changed and extended the device API (timeouts, strong/weak and VA signals, gets, world GIN
// barriers, reduce-copy helpers, abort flag). Versions between 2.28 and 2.32 take the 2.28 path.
#if NCCL_VERSION_CODE >= 23200
#define WEFT_NCCL_2_32 1
#else
#define WEFT_NCCL_2_32 0
#endif

// Launch-time specialization (docs/kernel-abi.md, "Argument alignment"): the host compiles a kernel with
// WEFT_ALIGNED_ARGS=1 for launches whose slice and window arguments all start on a 16-byte boundary (every weft and
// cudarc allocation does), and without it for any other launch. With it, each entry point tells the compiler so,
// and packs on those arguments are plain 16-byte accesses with no alignment test and no fallback path.
#ifndef WEFT_ALIGNED_ARGS
#define WEFT_ALIGNED_ARGS 0
#endif

// Bounds (docs/macro.md, "Bounds"): the macro emits each access it could not prove in bounds through a
// weft::detail::*_at function (end of this file). With WEFT_BOUNDS_CHECKS=1 (the form a kernel's checked `launch`
// runs) those check the access and stop the kernel with a trap if it falls outside; without it (`launch_unchecked`)
// they are the plain access. Proven accesses never go through them.
#ifndef WEFT_BOUNDS_CHECKS
#define WEFT_BOUNDS_CHECKS 0
#endif

#define WEFT_FN __device__ __forceinline__

// The wgmma mainloop of gemm_block (opt-in: WEFT_GEMM_MAINLOOP=wgmma, which compiles for sm_90a with
// -DWEFT_GEMM_WGMMA). ptxas serializes every wgmma of a kernel that contains a function call (its C7510 "wgmma
// pipeline crossing function boundary"), so in this form nothing in weft.cuh calls one: the traps below report
// through the trap report only, without printf.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && defined(WEFT_GEMM_WGMMA)
#define WEFT_GEMM_USES_WGMMA 1
#define WEFT_TRAP_PRINTS 0
#else
#define WEFT_TRAP_PRINTS 1
#endif

// Trap reports (host/src/trap.rs). A kernel stopping itself — a failed bounds check, a misused gemm_block — first
// writes what happened into a report in pinned host memory, which the host can still read once the trap has ended
// the CUDA context, so the error weft returns says why (`Error::KernelTrapped`). The host sets `report` and `module`
// when it loads the module; until then (or for a module loaded by other means) a trap only traps.
struct WeftTrapReport {
  unsigned int state;  // 0 while empty, 2 once complete (written last)
  unsigned int kind;   // 1: out-of-bounds access (a: index, b: limit); 2: gemm_block misuse (code: which rule)
  unsigned int line;   // the line of the kernel's Rust source
  unsigned int code;
  unsigned long long a, b;
  unsigned int module;  // the host's number for the module (its kernel's name)
  unsigned int block[3], thread[3];
  unsigned int reserved;
};
static_assert(sizeof(WeftTrapReport) == 64 && offsetof(WeftTrapReport, a) == 16 &&
                  offsetof(WeftTrapReport, module) == 32 && offsetof(WeftTrapReport, thread) == 48,
              "host/src/trap.rs reads this layout");
struct WeftTrapTarget {
  WeftTrapReport* report;
  unsigned int module;
};
extern "C" {
__device__ WeftTrapTarget weft_trap_target = {nullptr, 0};
// The module's claim: only its first trapping thread writes the report.
__device__ unsigned int weft_trap_claim = 0;
}

namespace weft {

namespace detail {
template <class... T>
struct always_false {
  static constexpr bool value = false;
};
// Keeps a parameter out of template argument deduction (`atomic_add(x, 1, ...)` with an `int` literal).
template <class T>
struct identity {
  using type = T;
};
template <class T>
using no_deduce = typename identity<T>::type;

WEFT_FN uint32_t linear_thread_index() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Memory orders and scopes (Rust: ordering.rs)

enum class Order : uint32_t { Relaxed, Acquire, Release, AcqRel, SeqCst };
enum class Scope : uint32_t { Thread, Block, Device, System };

namespace detail {
WEFT_FN cuda::memory_order to_cuda(Order o) {
  switch (o) {
    case Order::Relaxed: return cuda::memory_order_relaxed;
    case Order::Acquire: return cuda::memory_order_acquire;
    case Order::Release: return cuda::memory_order_release;
    case Order::AcqRel: return cuda::memory_order_acq_rel;
    default: return cuda::memory_order_seq_cst;
  }
}
WEFT_FN cuda::thread_scope to_cuda(Scope s) {
  switch (s) {
    case Scope::Thread: return cuda::thread_scope_thread;
    case Scope::Block: return cuda::thread_scope_block;
    case Scope::Device: return cuda::thread_scope_device;
    default: return cuda::thread_scope_system;
  }
}
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Execution (Rust: exec.rs)

constexpr uint32_t WARP_SIZE = 32;

WEFT_FN uint32_t thread_idx_x() { return threadIdx.x; }
WEFT_FN uint32_t thread_idx_y() { return threadIdx.y; }
WEFT_FN uint32_t thread_idx_z() { return threadIdx.z; }
WEFT_FN uint32_t block_idx_x() { return blockIdx.x; }
WEFT_FN uint32_t block_idx_y() { return blockIdx.y; }
WEFT_FN uint32_t block_idx_z() { return blockIdx.z; }
WEFT_FN uint32_t block_dim_x() { return blockDim.x; }
WEFT_FN uint32_t block_dim_y() { return blockDim.y; }
WEFT_FN uint32_t block_dim_z() { return blockDim.z; }
WEFT_FN uint32_t grid_dim_x() { return gridDim.x; }
WEFT_FN uint32_t grid_dim_y() { return gridDim.y; }
WEFT_FN uint32_t grid_dim_z() { return gridDim.z; }

WEFT_FN size_t index_1d() { return size_t(blockIdx.x) * size_t(blockDim.x) + size_t(threadIdx.x); }
WEFT_FN size_t grid_size_1d() { return size_t(gridDim.x) * size_t(blockDim.x); }

// `for i in grid_stride(n)` is lowered to a plain loop (rule R11); this range makes
// `for (size_t i : weft::grid_stride(n))` compile as well.
struct GridStride {
  size_t start, end_, step;
  struct Iter {
    size_t i, step;
    WEFT_FN size_t operator*() const { return i; }
    WEFT_FN Iter& operator++() {
      i += step;
      return *this;
    }
    WEFT_FN bool operator!=(Iter const& end) const { return i < end.i; }
  };
  WEFT_FN Iter begin() const { return Iter{start, step}; }
  WEFT_FN Iter end() const { return Iter{end_, step}; }
};
WEFT_FN GridStride grid_stride(size_t n) { return GridStride{index_1d(), n, grid_size_1d()}; }

WEFT_FN void sync_threads() { __syncthreads(); }
WEFT_FN void sync_warp() { __syncwarp(); }

WEFT_FN uint32_t lane_id() {
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
WEFT_FN uint32_t warp_id() { return detail::linear_thread_index() / WARP_SIZE; }

// Programmatic dependent launch (exec.rs): no-ops unless the launch asked for it.
WEFT_FN void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
WEFT_FN void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

WEFT_FN uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <class T>
WEFT_FN T shfl(T value, uint32_t src_lane) {
  return __shfl_sync(0xffffffffu, value, int(src_lane));
}
template <class T>
WEFT_FN T shfl_xor(T value, uint32_t lane_mask) {
  return __shfl_xor_sync(0xffffffffu, value, int(lane_mask));
}
template <class T>
WEFT_FN T shfl_down(T value, uint32_t delta) {
  return __shfl_down_sync(0xffffffffu, value, delta);
}
template <class T>
WEFT_FN T shfl_up(T value, uint32_t delta) {
  return __shfl_up_sync(0xffffffffu, value, delta);
}
WEFT_FN uint32_t ballot(bool predicate) { return __ballot_sync(0xffffffffu, predicate); }
WEFT_FN uint32_t match_any(uint32_t value) { return __match_any_sync(0xffffffffu, value); }

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Numbers (Rust: numeric.rs). Half types compute in float and round once.

template <class T>
WEFT_FN T zero() { return T(0); }
template <>
WEFT_FN __half zero<__half>() { return __float2half_rn(0.0f); }
template <>
WEFT_FN __nv_bfloat16 zero<__nv_bfloat16>() { return __float2bfloat16_rn(0.0f); }

template <class T>
WEFT_FN T one() { return T(1); }
template <>
WEFT_FN __half one<__half>() { return __float2half_rn(1.0f); }
template <>
WEFT_FN __nv_bfloat16 one<__nv_bfloat16>() { return __float2bfloat16_rn(1.0f); }

template <class T>
WEFT_FN T from_f32(float v) { return static_cast<T>(v); }
template <>
WEFT_FN __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
WEFT_FN __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Rust's `count_ones` on the integer types (R10: `x.count_ones()` → `weft::count_ones(x)`), always a u32.
WEFT_FN uint32_t count_ones(uint32_t x) { return uint32_t(__popc(x)); }
WEFT_FN uint32_t count_ones(int32_t x) { return uint32_t(__popc(uint32_t(x))); }
WEFT_FN uint32_t count_ones(unsigned long long x) { return uint32_t(__popcll(x)); }
WEFT_FN uint32_t count_ones(unsigned long x) { return uint32_t(__popcll((unsigned long long)x)); }
WEFT_FN uint32_t count_ones(long long x) { return uint32_t(__popcll((unsigned long long)x)); }
WEFT_FN uint32_t count_ones(long x) { return uint32_t(__popcll((unsigned long long)x)); }
// Rust's `div_ceil` on the unsigned types (R10: `a.div_ceil(b)` → `weft::div_ceil(a, b)`), without the overflow of
// `(a + b - 1) / b`.
template <class T>
WEFT_FN T div_ceil(T a, T b) { return a / b + (a % b != 0 ? T(1) : T(0)); }

WEFT_FN float to_f32(float x) { return x; }
WEFT_FN float to_f32(double x) { return float(x); }
WEFT_FN float to_f32(__half x) { return __half2float(x); }
WEFT_FN float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

// One unary function for the four float types: float and double call the libm name, half types go through float.
#define WEFT_UNARY(name, float_fn, double_fn)                                                          \
  WEFT_FN float name(float x) { return ::float_fn(x); }                                                \
  WEFT_FN double name(double x) { return ::double_fn(x); }                                             \
  WEFT_FN __half name(__half x) { return __float2half_rn(::float_fn(__half2float(x))); }               \
  WEFT_FN __nv_bfloat16 name(__nv_bfloat16 x) { return __float2bfloat16_rn(::float_fn(__bfloat162float(x))); }

WEFT_UNARY(sqrt, sqrtf, sqrt)
WEFT_UNARY(rsqrt, rsqrtf, rsqrt)
WEFT_UNARY(exp, expf, exp)
WEFT_UNARY(log, logf, log)
WEFT_UNARY(ln, logf, log)
WEFT_UNARY(tanh, tanhf, tanh)
WEFT_UNARY(abs, fabsf, fabs)
#undef WEFT_UNARY

WEFT_FN float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
WEFT_FN double fma(double a, double b, double c) { return ::fma(a, b, c); }
WEFT_FN __half fma(__half a, __half b, __half c) { return __hfma(a, b, c); }
WEFT_FN __nv_bfloat16 fma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) { return __hfma(a, b, c); }
template <class T>
WEFT_FN T mul_add(T x, detail::no_deduce<T> a, detail::no_deduce<T> b) { return weft::fma(x, a, b); }

WEFT_FN float min(float a, float b) { return ::fminf(a, b); }
WEFT_FN double min(double a, double b) { return ::fmin(a, b); }
WEFT_FN __half min(__half a, __half b) { return __hmin(a, b); }
WEFT_FN __nv_bfloat16 min(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmin(a, b); }
WEFT_FN float max(float a, float b) { return ::fmaxf(a, b); }
WEFT_FN double max(double a, double b) { return ::fmax(a, b); }
WEFT_FN __half max(__half a, __half b) { return __hmax(a, b); }
WEFT_FN __nv_bfloat16 max(__nv_bfloat16 a, __nv_bfloat16 b) { return __hmax(a, b); }
template <class T, class = typename std::enable_if<std::is_integral<T>::value>::type>
WEFT_FN T min(T a, detail::no_deduce<T> b) { return b < a ? b : a; }
template <class T, class = typename std::enable_if<std::is_integral<T>::value>::type>
WEFT_FN T max(T a, detail::no_deduce<T> b) { return a < b ? b : a; }
template <class T, class = typename std::enable_if<std::is_signed<T>::value && std::is_integral<T>::value>::type>
WEFT_FN T abs(T a) { return a < 0 ? T(-a) : a; }

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Warp and block reductions (Rust: exec.rs)

namespace detail {
struct OpSum {
  template <class T>
  WEFT_FN T operator()(T a, T b) const { return a + b; }
};
struct OpMax {
  template <class T>
  WEFT_FN T operator()(T a, T b) const { return weft::max(a, b); }
};
struct OpMin {
  template <class T>
  WEFT_FN T operator()(T a, T b) const { return weft::min(a, b); }
};

template <class T, class Op>
WEFT_FN T warp_reduce(T v, Op op) {
#pragma unroll
  for (uint32_t offset = 16; offset > 0; offset >>= 1) v = op(v, weft::shfl_xor(v, offset));
  return v;
}

// Needs a block size that is a multiple of 32. The scratch is per instantiation; the leading sync makes a second
// call right after the first safe.
template <class T, class Op>
WEFT_FN T block_reduce(T v, Op op, bool pad_with_zero) {
  __shared__ T scratch[32];
  uint32_t tid = linear_thread_index();
  uint32_t nwarps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
  v = warp_reduce(v, op);
  __syncthreads();
  if ((tid & 31) == 0) scratch[tid / 32] = v;
  __syncthreads();
  if (tid < 32) {
    T w = tid < nwarps ? scratch[tid] : (pad_with_zero ? weft::zero<T>() : scratch[0]);
    w = warp_reduce(w, op);
    if (tid == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}
}  // namespace detail

template <class T>
WEFT_FN T warp_reduce_sum(T v) { return detail::warp_reduce(v, detail::OpSum{}); }
template <class T>
WEFT_FN T warp_reduce_max(T v) { return detail::warp_reduce(v, detail::OpMax{}); }
template <class T>
WEFT_FN T warp_reduce_min(T v) { return detail::warp_reduce(v, detail::OpMin{}); }
template <class T>
WEFT_FN T block_reduce_sum(T v) { return detail::block_reduce(v, detail::OpSum{}, true); }
template <class T>
WEFT_FN T block_reduce_max(T v) { return detail::block_reduce(v, detail::OpMax{}, false); }
template <class T>
WEFT_FN T block_reduce_min(T v) { return detail::block_reduce(v, detail::OpMin{}, false); }

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Atomics and fences (Rust: atomic.rs). Read-modify-write atomics are relaxed.

namespace detail {
// Calls f(cuda::atomic_ref<T, scope>) for the run-time scope.
template <class T, class F>
WEFT_FN auto with_atomic_ref(T& place, Scope scope, F f) {
  switch (scope) {
    case Scope::Thread: return f(cuda::atomic_ref<T, cuda::thread_scope_thread>(place));
    case Scope::Block: return f(cuda::atomic_ref<T, cuda::thread_scope_block>(place));
    case Scope::Device: return f(cuda::atomic_ref<T, cuda::thread_scope_device>(place));
    default: return f(cuda::atomic_ref<T, cuda::thread_scope_system>(place));
  }
}

// 16-bit float add at system scope: CAS on the aligned 32-bit word holding the element.
template <class H>
WEFT_FN H atomic_add_half_system(H& place, H value) {
  uintptr_t addr = reinterpret_cast<uintptr_t>(&place);
  unsigned int* word = reinterpret_cast<unsigned int*>(addr & ~uintptr_t(3));
  unsigned int shift = (addr & 2) ? 16 : 0;
  unsigned int old = *reinterpret_cast<volatile unsigned int*>(word), assumed;
  H previous;
  do {
    assumed = old;
    unsigned short bits = (unsigned short)(assumed >> shift);
    previous = *reinterpret_cast<H*>(&bits);
    H sum = H(float(previous) + float(value));
    unsigned short sum_bits = *reinterpret_cast<unsigned short*>(&sum);
    unsigned int next = (assumed & ~(0xffffu << shift)) | ((unsigned int)sum_bits << shift);
    old = atomicCAS_system(word, assumed, next);
  } while (old != assumed);
  return previous;
}
}  // namespace detail

template <class T>
WEFT_FN T atomic_add(T& place, detail::no_deduce<T> value, Scope scope) {
  return detail::with_atomic_ref(place, scope, [&](auto ref) { return ref.fetch_add(value, cuda::memory_order_relaxed); });
}
WEFT_FN __half atomic_add(__half& place, __half value, Scope scope) {
  if (scope == Scope::System) return detail::atomic_add_half_system(place, value);
  return atomicAdd(&place, value);
}
WEFT_FN __nv_bfloat16 atomic_add(__nv_bfloat16& place, __nv_bfloat16 value, Scope scope) {
  if (scope == Scope::System) return detail::atomic_add_half_system(place, value);
  return atomicAdd(&place, value);
}
template <class T>
WEFT_FN T atomic_max(T& place, detail::no_deduce<T> value, Scope scope) {
  return detail::with_atomic_ref(place, scope, [&](auto ref) { return ref.fetch_max(value, cuda::memory_order_relaxed); });
}
template <class T>
WEFT_FN T atomic_min(T& place, detail::no_deduce<T> value, Scope scope) {
  return detail::with_atomic_ref(place, scope, [&](auto ref) { return ref.fetch_min(value, cuda::memory_order_relaxed); });
}
template <class T>
WEFT_FN T atomic_exch(T& place, detail::no_deduce<T> value, Scope scope) {
  return detail::with_atomic_ref(place, scope, [&](auto ref) { return ref.exchange(value, cuda::memory_order_relaxed); });
}
template <class T>
WEFT_FN T atomic_cas(T& place, detail::no_deduce<T> expected, detail::no_deduce<T> value, Scope scope) {
  return detail::with_atomic_ref(place, scope, [&](auto ref) {
    T seen = expected;
    ref.compare_exchange_strong(seen, value, cuda::memory_order_relaxed);
    return seen;
  });
}
template <class T, class = typename std::enable_if<!std::is_pointer<T>::value>::type>
WEFT_FN T atomic_load(T const& place, Order order, Scope scope) {
  return detail::with_atomic_ref(const_cast<T&>(place), scope, [&](auto ref) { return ref.load(detail::to_cuda(order)); });
}
template <class T>
WEFT_FN void atomic_store(T& place, detail::no_deduce<T> value, Order order, Scope scope) {
  detail::with_atomic_ref(place, scope, [&](auto ref) {
    ref.store(value, detail::to_cuda(order));
    return 0;
  });
}
// Pointer forms, for a macro that lowers `&mut place` to `&(place)`.
template <class T>
WEFT_FN T atomic_add(T* place, detail::no_deduce<T> value, Scope scope) { return weft::atomic_add(*place, value, scope); }
template <class T>
WEFT_FN T atomic_max(T* place, detail::no_deduce<T> value, Scope scope) { return weft::atomic_max(*place, value, scope); }
template <class T>
WEFT_FN T atomic_min(T* place, detail::no_deduce<T> value, Scope scope) { return weft::atomic_min(*place, value, scope); }
template <class T>
WEFT_FN T atomic_exch(T* place, detail::no_deduce<T> value, Scope scope) { return weft::atomic_exch(*place, value, scope); }
template <class T>
WEFT_FN T atomic_cas(T* place, detail::no_deduce<T> expected, detail::no_deduce<T> value, Scope scope) {
  return weft::atomic_cas(*place, expected, value, scope);
}
template <class T>
WEFT_FN T atomic_load(T const* place, Order order, Scope scope) { return weft::atomic_load(*place, order, scope); }
template <class T>
WEFT_FN void atomic_store(T* place, detail::no_deduce<T> value, Order order, Scope scope) {
  weft::atomic_store(*place, value, order, scope);
}

WEFT_FN void atomic_fence(Order order, Scope scope) {
  cuda::memory_order o = detail::to_cuda(order);
  switch (scope) {
    case Scope::Thread: cuda::atomic_thread_fence(o, cuda::thread_scope_thread); break;
    case Scope::Block: cuda::atomic_thread_fence(o, cuda::thread_scope_block); break;
    case Scope::Device: cuda::atomic_thread_fence(o, cuda::thread_scope_device); break;
    default: cuda::atomic_thread_fence(o, cuda::thread_scope_system); break;
  }
}
WEFT_FN void threadfence() { __threadfence(); }
WEFT_FN void threadfence_block() { __threadfence_block(); }
WEFT_FN void threadfence_system() { __threadfence_system(); }

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// 16-byte packs (Rust: pack.rs). Pack<T> is 16 bytes of T; WidePack<T> the same lanes in float, where arithmetic
// happens. Loads and stores are one 16-byte instruction on an aligned address and lane by lane on any other (a
// slice that starts mid-pack), so an odd offset is slower, never a misaligned-address fault. Where the compiler
// knows the address is aligned (kernel arguments under WEFT_ALIGNED_ARGS, shared arrays, and offsets from them in
// whole packs) the test folds away.

template <class T>
struct alignas(16) Pack {
  static constexpr size_t LANES = 16 / sizeof(T);
  static_assert(LANES * sizeof(T) == 16, "weft::Pack<T> needs a T whose size divides 16");
  T lanes[LANES];

  WEFT_FN static Pack splat(T value) {
    Pack p;
#pragma unroll
    for (size_t k = 0; k < LANES; ++k) p.lanes[k] = value;
    return p;
  }
  WEFT_FN T lane(size_t k) const { return lanes[k]; }
  WEFT_FN auto widen() const;
  // No lane holds the Lamport sentinel (negative zero): the pack was written (pack.rs, `Lamport`).
  WEFT_FN bool lamport_ready() const;
};

template <class T>
WEFT_FN constexpr size_t pack_lanes() { return Pack<T>::LANES; }

template <class T>
struct WidePack {
  static constexpr size_t LANES = Pack<T>::LANES;
  float lanes[LANES];

  WEFT_FN static WidePack splat(float value) {
    WidePack w;
#pragma unroll
    for (size_t k = 0; k < LANES; ++k) w.lanes[k] = value;
    return w;
  }
  WEFT_FN Pack<T> narrow() const {
    Pack<T> p;
#pragma unroll
    for (size_t k = 0; k < LANES; ++k) p.lanes[k] = weft::from_f32<T>(lanes[k]);
    return p;
  }
  WEFT_FN float lane(size_t k) const { return lanes[k]; }
  WEFT_FN float lane_sum() const {
    float s = lanes[0];
#pragma unroll
    for (size_t k = 1; k < LANES; ++k) s += lanes[k];
    return s;
  }
};

template <class T>
WEFT_FN auto Pack<T>::widen() const {
  WidePack<T> w;
#pragma unroll
  for (size_t k = 0; k < LANES; ++k) w.lanes[k] = weft::to_f32(lanes[k]);
  return w;
}

// The compound forms do the work; the plain ones copy their left operand (taken by value) and apply them.
#define WEFT_WIDE_OP(op)                                                                                   \
  template <class T>                                                                                       \
  WEFT_FN WidePack<T>& operator op##=(WidePack<T>& a, WidePack<T> const& b) {                              \
    _Pragma("unroll") for (size_t k = 0; k < WidePack<T>::LANES; ++k) a.lanes[k] op## = b.lanes[k];         \
    return a;                                                                                              \
  }                                                                                                        \
  template <class T>                                                                                       \
  WEFT_FN WidePack<T>& operator op##=(WidePack<T>& a, float b) {                                           \
    _Pragma("unroll") for (size_t k = 0; k < WidePack<T>::LANES; ++k) a.lanes[k] op## = b;                  \
    return a;                                                                                              \
  }                                                                                                        \
  template <class T>                                                                                       \
  WEFT_FN WidePack<T> operator op(WidePack<T> a, WidePack<T> const& b) { return a op## = b; }              \
  template <class T>                                                                                       \
  WEFT_FN WidePack<T> operator op(WidePack<T> a, float b) { return a op## = b; }
WEFT_WIDE_OP(+)
WEFT_WIDE_OP(-)
WEFT_WIDE_OP(*)
WEFT_WIDE_OP(/)
#undef WEFT_WIDE_OP

// The scalar on the left (`2.0f * w`, `1.0f - w`).
#define WEFT_WIDE_LEFT_OP(op)                                                                  \
  template <class T>                                                                           \
  WEFT_FN WidePack<T> operator op(float a, WidePack<T> b) {                                    \
    _Pragma("unroll") for (size_t k = 0; k < WidePack<T>::LANES; ++k) b.lanes[k] = a op b.lanes[k]; \
    return b;                                                                                  \
  }
WEFT_WIDE_LEFT_OP(+)
WEFT_WIDE_LEFT_OP(-)
WEFT_WIDE_LEFT_OP(*)
WEFT_WIDE_LEFT_OP(/)
#undef WEFT_WIDE_LEFT_OP

template <class T>
WEFT_FN WidePack<T> sqrt(WidePack<T> a) {
#pragma unroll
  for (size_t k = 0; k < WidePack<T>::LANES; ++k) a.lanes[k] = ::sqrtf(a.lanes[k]);
  return a;
}
template <class T>
WEFT_FN WidePack<T> rsqrt(WidePack<T> a) {
#pragma unroll
  for (size_t k = 0; k < WidePack<T>::LANES; ++k) a.lanes[k] = ::rsqrtf(a.lanes[k]);
  return a;
}
template <class T>
WEFT_FN WidePack<T> mul_add(WidePack<T> a, WidePack<T> const& m, WidePack<T> const& b) {
#pragma unroll
  for (size_t k = 0; k < WidePack<T>::LANES; ++k) a.lanes[k] = ::fmaf(a.lanes[k], m.lanes[k], b.lanes[k]);
  return a;
}

namespace detail {
template <class T>
WEFT_FN Pack<T> load_pack(const T* base, size_t pack) {
  const T* p = base + pack * Pack<T>::LANES;
  Pack<T> out;
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    *reinterpret_cast<uint4*>(out.lanes) = *reinterpret_cast<const uint4*>(p);
  } else {
#pragma unroll
    for (size_t k = 0; k < Pack<T>::LANES; ++k) out.lanes[k] = p[k];
  }
  return out;
}
template <class T>
WEFT_FN void store_pack(T* base, size_t pack, Pack<T> const& value) {
  T* p = base + pack * Pack<T>::LANES;
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(value.lanes);
  } else {
#pragma unroll
    for (size_t k = 0; k < Pack<T>::LANES; ++k) p[k] = value.lanes[k];
  }
}

// Lamport packs (Rust: pack.rs, `Lamport`): "not yet written" is negative zero in every lane, so a reader polls the
// data itself instead of a flag. A lane is an element; each is stored and loaded whole (an aligned 16-byte access
// moves four 32-bit words, and a reader checks every lane), so a pack seen half written is seen as not ready.
template <class T>
struct LamportBits;
template <>
struct LamportBits<float> { using U = uint32_t; static constexpr U SENTINEL = 0x80000000u; };
template <>
struct LamportBits<double> { using U = unsigned long long; static constexpr U SENTINEL = 0x8000000000000000ull; };
template <>
struct LamportBits<__half> { using U = unsigned short; static constexpr U SENTINEL = 0x8000u; };
template <>
struct LamportBits<__nv_bfloat16> { using U = unsigned short; static constexpr U SENTINEL = 0x8000u; };

template <class T>
WEFT_FN bool lamport_ready(Pack<T> const& v) {
  using U = typename LamportBits<T>::U;
  bool ready = true;
#pragma unroll
  for (size_t k = 0; k < Pack<T>::LANES; ++k) {
    U bits;
    memcpy(&bits, &v.lanes[k], sizeof(U));
    ready &= bits != LamportBits<T>::SENTINEL;
  }
  return ready;
}
// Negative zero becomes positive zero (the same value in every sum): a stored pack is never taken for "not yet".
template <class T>
WEFT_FN Pack<T> lamport_clean(Pack<T> v) {
  using U = typename LamportBits<T>::U;
#pragma unroll
  for (size_t k = 0; k < Pack<T>::LANES; ++k) {
    U bits;
    memcpy(&bits, &v.lanes[k], sizeof(U));
    if (bits == LamportBits<T>::SENTINEL) bits = 0;
    memcpy(&v.lanes[k], &bits, sizeof(U));
  }
  return v;
}
template <class T>
WEFT_FN Pack<T> lamport_empty() {
  using U = typename LamportBits<T>::U;
  Pack<T> v;
#pragma unroll
  for (size_t k = 0; k < Pack<T>::LANES; ++k) {
    U bits = LamportBits<T>::SENTINEL;
    memcpy(&v.lanes[k], &bits, sizeof(U));
  }
  return v;
}
// Volatile (relaxed, system scope) 16-byte accesses to a peer's memory through its LSA mapping; element by element
// where the address is not 16-byte aligned.
template <class T>
WEFT_FN void lamport_put(T* base, size_t pack, Pack<T> const& value) {
  T* p = base + pack * Pack<T>::LANES;
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint4 w = *reinterpret_cast<const uint4*>(value.lanes);
    asm volatile("st.volatile.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(w.x), "r"(w.y), "r"(w.z),
                 "r"(w.w)
                 : "memory");
  } else {
    using U = typename LamportBits<T>::U;
#pragma unroll
    for (size_t k = 0; k < Pack<T>::LANES; ++k) {
      U bits;
      memcpy(&bits, &value.lanes[k], sizeof(U));
      *reinterpret_cast<volatile U*>(p + k) = bits;
    }
  }
}
template <class T>
WEFT_FN Pack<T> lamport_get(const T* base, size_t pack) {
  const T* p = base + pack * Pack<T>::LANES;
  Pack<T> out;
  if ((reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    uint4 w;
    asm volatile("ld.volatile.global.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w)
                 : "l"(p)
                 : "memory");
    *reinterpret_cast<uint4*>(out.lanes) = w;
  } else {
    using U = typename LamportBits<T>::U;
#pragma unroll
    for (size_t k = 0; k < Pack<T>::LANES; ++k) {
      U bits = *reinterpret_cast<const volatile U*>(p + k);
      memcpy(&out.lanes[k], &bits, sizeof(U));
    }
  }
  return out;
}
// A WidePack<U>'s float lanes from / to floats (mixed precision: f32 master weights next to bf16 parameters).
template <class U>
WEFT_FN WidePack<U> load_wide(const float* base, size_t pack) {
  constexpr size_t L = WidePack<U>::LANES;
  const float* p = base + pack * L;
  WidePack<U> out;
  if constexpr (L % 4 == 0) {
#pragma unroll
    for (size_t k = 0; k < L; k += 4) {
      Pack<float> part = load_pack(p + k, 0);
#pragma unroll
      for (size_t j = 0; j < 4; ++j) out.lanes[k + j] = part.lanes[j];
    }
  } else {
#pragma unroll
    for (size_t k = 0; k < L; ++k) out.lanes[k] = p[k];
  }
  return out;
}
template <class U>
WEFT_FN void store_wide(float* base, size_t pack, WidePack<U> const& value) {
  constexpr size_t L = WidePack<U>::LANES;
  float* p = base + pack * L;
  if constexpr (L % 4 == 0) {
#pragma unroll
    for (size_t k = 0; k < L; k += 4) {
      Pack<float> part;
#pragma unroll
      for (size_t j = 0; j < 4; ++j) part.lanes[j] = value.lanes[k + j];
      store_pack(p + k, 0, part);
    }
  } else {
#pragma unroll
    for (size_t k = 0; k < L; ++k) p[k] = value.lanes[k];
  }
}
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Slices and shared arrays (Rust: &[T], &mut [T], shared.rs). Layouts are the kernel ABI's:
// Slice<T> = { const T* ptr; size_t len }, SliceMut<T> = { T* ptr; size_t len } (the length field is `count` here
// because `len` is the method).

template <class T>
struct Slice {
  const T* ptr;
  size_t count;
  WEFT_FN const T& operator[](size_t i) const { return ptr[i]; }
  WEFT_FN size_t len() const { return count; }
  WEFT_FN bool is_empty() const { return count == 0; }
  WEFT_FN const T* as_ptr() const { return ptr; }
  WEFT_FN Pack<T> load_pack(size_t pack) const { return detail::load_pack(ptr, pack); }
  template <class U>
  WEFT_FN WidePack<U> load_wide(size_t pack) const {
    static_assert(std::is_same<T, float>::value, "load_wide reads an f32 slice");
    return detail::load_wide<U>(ptr, pack);
  }
  // `&x[start..end]`
  WEFT_FN Slice subslice(size_t start, size_t end) const { return Slice{ptr + start, end - start}; }
};

template <class T>
struct SliceMut {
  T* ptr;
  size_t count;
  WEFT_FN T& operator[](size_t i) const { return ptr[i]; }
  WEFT_FN size_t len() const { return count; }
  WEFT_FN bool is_empty() const { return count == 0; }
  WEFT_FN T* as_ptr() const { return ptr; }
  WEFT_FN T* as_mut_ptr() const { return ptr; }
  WEFT_FN Pack<T> load_pack(size_t pack) const { return detail::load_pack<T>(ptr, pack); }
  WEFT_FN void store_pack(size_t pack, Pack<T> const& value) const { detail::store_pack(ptr, pack, value); }
  template <class U>
  WEFT_FN WidePack<U> load_wide(size_t pack) const {
    static_assert(std::is_same<T, float>::value, "load_wide reads an f32 slice");
    return detail::load_wide<U>(ptr, pack);
  }
  template <class U>
  WEFT_FN void store_wide(size_t pack, WidePack<U> const& value) const {
    static_assert(std::is_same<T, float>::value, "store_wide writes an f32 slice");
    detail::store_wide(ptr, pack, value);
  }
  // `&mut x[start..end]`
  WEFT_FN SliceMut subslice(size_t start, size_t end) const { return SliceMut{ptr + start, end - start}; }
  // `&mut [T]` coerces to `&[T]` in Rust.
  WEFT_FN operator Slice<T>() const { return Slice<T>{ptr, count}; }
};

// Declared by the macro as `__shared__ weft::SharedArray<T, N> name;` (rule R12): trivially constructible, so
// shared memory accepts it.
template <class T, size_t N>
struct alignas(16) SharedArray {
  T data[N];
  WEFT_FN T& operator[](size_t i) { return data[i]; }
  WEFT_FN const T& operator[](size_t i) const { return data[i]; }
  WEFT_FN constexpr size_t len() const { return N; }
  WEFT_FN constexpr bool is_empty() const { return N == 0; }
  WEFT_FN Slice<T> as_slice() const { return Slice<T>{data, N}; }
  WEFT_FN SliceMut<T> as_mut_slice() { return SliceMut<T>{data, N}; }
};

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Coops (Rust: coop.rs). `Nccl` is NCCL's coop type; nccl() makes the value NCCL's calls take.

struct Thread {
  using Nccl = ncclCoopThread;
  WEFT_FN Nccl nccl() const { return Nccl(); }
  WEFT_FN uint32_t thread_rank() const { return 0; }
  WEFT_FN uint32_t size() const { return 1; }
  WEFT_FN void sync() const {}
};

struct Warp {
  using Nccl = ncclCoopWarp;
  WEFT_FN Nccl nccl() const { return Nccl(); }
  WEFT_FN uint32_t thread_rank() const { return lane_id(); }
  WEFT_FN uint32_t size() const { return 32; }
  WEFT_FN void sync() const { __syncwarp(); }
};

struct Cta {
  using Nccl = ncclCoopCta;
  WEFT_FN Nccl nccl() const { return Nccl(); }
  WEFT_FN uint32_t thread_rank() const { return threadIdx.x; }
  WEFT_FN uint32_t size() const { return blockDim.x; }
  WEFT_FN void sync() const { __syncthreads(); }
};

struct Lanes {
  using Nccl = ncclCoopLanes;
  uint32_t mask_;
  WEFT_FN static Lanes from_mask(uint32_t mask) { return Lanes{mask}; }
  WEFT_FN static Lanes coalesced() { return Lanes{__activemask()}; }
  WEFT_FN uint32_t mask() const { return mask_; }
  WEFT_FN Nccl nccl() const { return Nccl(mask_); }
  WEFT_FN uint32_t thread_rank() const { return uint32_t(nccl().thread_rank()); }
  WEFT_FN uint32_t size() const { return uint32_t(__popc(mask_)); }
  WEFT_FN void sync() const { __syncwarp(mask_); }
};

struct WarpSpan {
  using Nccl = ncclCoopWarpSpan;
  uint32_t first_warp_, warp_count_, id_;
  WEFT_FN static WarpSpan from_warps(uint32_t first_warp, uint32_t warp_count, uint32_t id) {
    return WarpSpan{first_warp, warp_count, id};
  }
  WEFT_FN uint32_t first_warp() const { return first_warp_; }
  WEFT_FN uint32_t warp_count() const { return warp_count_; }
  WEFT_FN uint32_t id() const { return id_; }
  WEFT_FN Nccl nccl() const { return Nccl(int(first_warp_), int(warp_count_), int(id_)); }
  WEFT_FN uint32_t thread_rank() const { return uint32_t(nccl().thread_rank()); }
  WEFT_FN uint32_t size() const { return 32 * warp_count_; }
  WEFT_FN void sync() const { nccl().sync(); }
};

namespace detail {
// Whether `flag` is set on any thread of the coop; every thread of the coop must call, and gets the same answer.
// Also synchronises the coop.
WEFT_FN bool coop_any(Thread, bool flag) { return flag; }
WEFT_FN bool coop_any(Warp, bool flag) { return __any_sync(0xffffffffu, flag); }
WEFT_FN bool coop_any(Lanes c, bool flag) { return __any_sync(c.mask_, flag); }
WEFT_FN bool coop_any(Cta, bool flag) { return __syncthreads_or(flag) != 0; }
WEFT_FN bool coop_any(WarpSpan c, bool flag) {
  uint32_t any;
  asm volatile(
      "{ .reg .pred p, q; setp.ne.u32 p, %1, 0; barrier.red.or.pred q, %2, %3, p; selp.u32 %0, 1, 0, q; }"
      : "=r"(any)
      : "r"(uint32_t(flag)), "r"(1 + c.id_), "r"(32 * c.warp_count_)
      : "memory");
  return any != 0;
}
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Results of bounded waits (Rust: barrier.rs BarrierResult). A struct around an unscoped enum so that
// `r == weft::BarrierResult::TimedOut`, `switch (r) { case weft::BarrierResult::Ok: ... }` and `r.is_ok()` all work.

struct BarrierResult {
  enum Code : uint32_t { Ok = 0, TimedOut = 1, Aborted = 2 };
  Code code;
  WEFT_FN constexpr BarrierResult(Code c) : code(c) {}
  WEFT_FN constexpr operator Code() const { return code; }
  WEFT_FN constexpr bool is_ok() const { return code == Ok; }
  WEFT_FN constexpr bool is_timed_out() const { return code == TimedOut; }
  WEFT_FN constexpr bool is_aborted() const { return code == Aborted; }
};

namespace detail {
// Combines per-thread outcomes (timed out / aborted) over the coop: every thread gets the same result.
template <class Co>
WEFT_FN BarrierResult coop_result(Co coop, bool timed_out, bool aborted) {
  bool any_aborted = coop_any(coop, aborted);
  bool any_timed_out = coop_any(coop, timed_out);
  return any_aborted ? BarrierResult::Aborted : any_timed_out ? BarrierResult::TimedOut : BarrierResult::Ok;
}

// Whether the communicator's abort flag is raised (2.32 headers carry it in ncclDevComm), polled every 1024 steps.
WEFT_FN bool abort_requested(ncclDevComm const& comm, uint32_t& steps) {
#if WEFT_NCCL_2_32
  if ((++steps & 1023) != 0 || comm.abortFlag == nullptr) return false;
  return cuda::atomic_ref<uint32_t>{*comm.abortFlag}.load(cuda::memory_order_relaxed) != 0;
#else
  (void)comm;
  (void)steps;
  return false;
#endif
}

// NCCL 2.32's bounded waits count clock64() cycles; weft's API takes nanoseconds. Two cycles per nanosecond is at
// least the requested time on any GPU clocked at 2 GHz or less (H100/H200 boost at 1.98 GHz).
WEFT_FN uint64_t ns_to_cycles(uint64_t ns) { return ns > (~uint64_t(0)) / 2 ? ~uint64_t(0) : ns * 2; }
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Teams and the device communicator (Rust: comm.rs)

struct Team {
  uint32_t nranks, rank, stride;
  WEFT_FN static Team from_nccl(ncclTeam t) { return Team{uint32_t(t.nRanks), uint32_t(t.rank), uint32_t(t.stride)}; }
  WEFT_FN ncclTeam nccl() const {
    ncclTeam t;
    t.nRanks = int(nranks);
    t.rank = int(rank);
    t.stride = int(stride);
    return t;
  }
  WEFT_FN bool contains(Team other, uint32_t r) const { return ncclTeamRankIsMember(nccl(), other.nccl(), int(r)); }
  WEFT_FN uint32_t rank_from(Team other, uint32_t r) const {
    return uint32_t(ncclTeamRankToTeam(nccl(), other.nccl(), int(r)));
  }
  // NCCL's factorizations need `inner_size` to divide the team's size; any other is the empty team (every peer
  // check against it fails), never a team whose members lie outside the communicator.
  WEFT_FN Team inner_factor(uint32_t inner_size) const {
    if (inner_size == 0 || nranks % inner_size != 0) return Team{0, 0, stride};
    return from_nccl(ncclTeamInnerFactor(nccl(), int(inner_size)));
  }
  WEFT_FN Team outer_factor(uint32_t inner_size) const {
    if (inner_size == 0 || nranks % inner_size != 0) return Team{0, 0, stride};
    return from_nccl(ncclTeamOuterFactor(nccl(), int(inner_size)));
  }
};

template <class T>
struct Window;
template <class T>
struct MultimemView;
template <class Co>
struct LsaBarrier;
template <class Co>
struct HybridBarrier;
template <class Co>
struct LlA2a;
struct LlA2aHandle;
struct GinSession;

// `weft::DevComm dev{dev__raw};` (rule R1): a pointer to the kernel's ncclDevComm parameter.
struct DevComm {
  ncclDevComm const* comm_;

  WEFT_FN explicit DevComm(ncclDevComm const& comm) : comm_(&comm) {}
  WEFT_FN ncclDevComm const& raw() const { return *comm_; }

  WEFT_FN uint32_t rank() const { return uint32_t(comm_->rank); }
  WEFT_FN uint32_t nranks() const { return uint32_t(comm_->nRanks); }
  WEFT_FN uint32_t lsa_rank() const { return uint32_t(comm_->lsaRank); }
  WEFT_FN uint32_t lsa_size() const { return uint32_t(comm_->lsaSize); }
  WEFT_FN Team world() const { return Team::from_nccl(ncclTeamWorld(*comm_)); }
  WEFT_FN Team lsa() const { return Team::from_nccl(ncclTeamLsa(*comm_)); }
  WEFT_FN Team rail() const { return Team::from_nccl(ncclTeamRail(*comm_)); }
  WEFT_FN uint32_t team_rank_to_world(Team team, uint32_t r) const {
    return uint32_t(ncclTeamRankToWorld(*comm_, team.nccl(), int(r)));
  }
  WEFT_FN uint32_t team_rank_to_lsa(Team team, uint32_t r) const {
    return uint32_t(ncclTeamRankToLsa(*comm_, team.nccl(), int(r)));
  }

  // LSA barrier sessions (barrier section below).
  template <class Co>
  WEFT_FN LsaBarrier<Co> lsa_barrier(Co coop, uint32_t index) const;
  template <class Co>
  WEFT_FN LsaBarrier<Co> lsa_multimem_barrier(Co coop, uint32_t index) const;

  // Reduce-copy (reduce-copy section below).
  template <class T, class Co>
  WEFT_FN void lsa_reduce_sum(Co coop, Window<T> const& src, SliceMut<T> dst, size_t count) const;
  template <class T, class Co>
  WEFT_FN void lsa_copy(Co coop, Slice<T> src, Window<T> const& dst, size_t count) const;
  template <class T, class Co>
  WEFT_FN void lsa_reduce_sum_copy(Co coop, Window<T> const& src, Window<T> const& dst, size_t count) const;

  // GIN (GIN section below).
  WEFT_FN GinSession gin(uint32_t context) const;
  template <class Co>
  WEFT_FN HybridBarrier<Co> hybrid_barrier(Co coop, GinSession const& gin, uint32_t index) const;

  // LL all-to-all.
  template <class Co>
  WEFT_FN LlA2a<Co> ll_a2a(Co coop, LlA2aHandle handle, uint32_t block, uint32_t max_elements) const;

  // Multimem.
  template <class T>
  WEFT_FN MultimemView<T> lsa_multimem(Window<T> const& window) const;
  template <class T, class Co>
  WEFT_FN void multimem_reduce_sum(Co coop, Window<T> const& src, SliceMut<T> dst, size_t count) const;
  template <class T, class Co>
  WEFT_FN void multimem_copy(Co coop, Slice<T> src, Window<T> const& dst, size_t count) const;
  template <class T, class Co>
  WEFT_FN void multimem_reduce_sum_copy(Co coop, Window<T> const& src, Window<T> const& dst, size_t count) const;
};

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Windows and views (Rust: window.rs). Window<T> is the kernel ABI's { ncclWindow_t win; size_t offset_bytes;
// size_t len } (the length field is `length` here because `len` is the method).

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Tensor cores (Rust: mma.rs): the warp-level `mma.sync.aligned.m16n8k16` with f16/bf16 inputs and an f32
// accumulator. A fragment is this lane's share of a tile, in the registers the instruction takes; the types carry
// the element type and the operand, so a wrong operand or type does not compile. Lane l's share, with
// g = l / 4 and t = l % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16"):
//   A (16 x 16, row-major):  r[0] = (g, 2t..2t+1), r[1] = (g+8, 2t..), r[2] = (g, 2t+8..), r[3] = (g+8, 2t+8..)
//   B (16 x 8, k x n):       r[0] = (k 2t..2t+1, n g), r[1] = (k 2t+8..2t+9, n g)
//   C (16 x 8, f32):         c[0..1] = (g, 2t..2t+1), c[2..3] = (g+8, 2t..2t+1)

template <class T>
struct MmaA {
  static_assert(sizeof(T) == 2, "mma.sync m16n8k16 takes 16-bit inputs (f16, bf16)");
  uint32_t r[4];
};
template <class T>
struct MmaB {
  static_assert(sizeof(T) == 2, "mma.sync m16n8k16 takes 16-bit inputs (f16, bf16)");
  uint32_t r[2];
};
struct MmaAcc {
  float c[4];
  WEFT_FN static MmaAcc zero() { return MmaAcc{{0.0f, 0.0f, 0.0f, 0.0f}}; }
};

// A block's 128 x 128 f32 product tile, as one thread holds it (gemm.rs): 256 threads in 8 warps (2 x 4, each
// 64 x 32: 4 x 4 accumulator fragments), 64 values per thread. Element `i` of this thread's share sits at
// (row(i), col(i)) of the tile.
//
// Two layouts, one per mainloop. `mma.sync` (any sm_80+): warps in a 2 x 4 grid, each 64 x 32 (4 x 4 fragments).
// `wgmma` (sm_90a): two warpgroups of 64 rows each, warp w of a warpgroup owning rows 16w.. and all 128 columns as
// 16 fragments of m16n8 (fragment f of the warp is acc[f / 4][f % 4]). Either way value i is fragment i / 4's
// element i % 4, at the fragment's row lane / 4 (+ 8 for elements 2 and 3) and column 2 (lane % 4) (+ 1 for odd i).
struct GemmTile {
  static constexpr size_t ROWS = 128, COLS = 128, THREADS = 256, PER_THREAD = 64;
  MmaAcc acc[4][4];
  // Which mainloop filled it (a constant where the mainloop is inlined, so the branches below fold away).
  bool warpgroups = false;
  WEFT_FN size_t len() const { return PER_THREAD; }
  WEFT_FN size_t row(size_t i) const {
    uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t f = i / 4, e = i % 4;
    size_t in_fragment = lane / 4 + (e >= 2 ? 8 : 0);
    if (warpgroups) return (warp / 4) * 64 + (warp % 4) * 16 + in_fragment;
    return (warp / 4) * 64 + (f / 4) * 16 + in_fragment;
  }
  WEFT_FN size_t col(size_t i) const {
    uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t f = i / 4, e = i % 4;
    size_t in_fragment = (lane % 4) * 2 + (e & 1);
    if (warpgroups) return f * 8 + in_fragment;
    return (warp % 4) * 32 + (f % 4) * 8 + in_fragment;
  }
  WEFT_FN float value(size_t i) const { return acc[(i / 4) / 4][(i / 4) % 4].c[i % 4]; }
};

namespace detail {
template <class T>
WEFT_FN uint32_t pair_bits(T lo, T hi) {
  uint16_t a, b;
  memcpy(&a, &lo, 2);
  memcpy(&b, &hi, 2);
  return uint32_t(a) | (uint32_t(b) << 16);
}
// acc (4 f32) += a (16 x 16) x b (16 x 8): mma.sync m16n8k16 on fragments in registers.
template <class T>
WEFT_FN void mma_16816(float* acc, const uint32_t* a, const uint32_t* b) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}
}  // namespace detail

template <class T>
WEFT_FN MmaAcc mma(MmaA<T> const& a, MmaB<T> const& b, MmaAcc acc) {
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                "weft::mma takes f16 or bf16 fragments");
  detail::mma_16816<T>(acc.c, a.r, b.r);
  return acc;
}


template <class T>
WEFT_FN bool Pack<T>::lamport_ready() const {
  return detail::lamport_ready(*this);
}

template <class T>
struct View {
  T* ptr;
  size_t length;
  WEFT_FN T& operator[](size_t i) const { return ptr[i]; }
  WEFT_FN size_t len() const { return length; }
  WEFT_FN bool is_empty() const { return length == 0; }
  WEFT_FN T* as_ptr() const { return ptr; }
  WEFT_FN Pack<T> load_pack(size_t pack) const { return detail::load_pack<T>(ptr, pack); }
  WEFT_FN void store_pack(size_t pack, Pack<T> const& value) const { detail::store_pack(ptr, pack, value); }
  // Lamport packs (pack.rs, `Lamport`).
  WEFT_FN void lamport_store_pack(size_t pack, Pack<T> const& value) const {
    detail::lamport_put(ptr, pack, detail::lamport_clean(value));
  }
  WEFT_FN void lamport_clear_pack(size_t pack) const { detail::lamport_put(ptr, pack, detail::lamport_empty<T>()); }
  WEFT_FN Pack<T> lamport_wait_pack(size_t pack, uint64_t deadline_ns) const {
    Pack<T> v = detail::lamport_get(ptr, pack);
    while (!detail::lamport_ready(v) && global_timer_ns() < deadline_ns) v = detail::lamport_get(ptr, pack);
    return v;
  }
};

template <class T>
struct Window {
  ncclWindow_t win;
  size_t offset_bytes;
  size_t length;

  WEFT_FN size_t len() const { return length; }
  WEFT_FN bool is_empty() const { return length == 0; }
  WEFT_FN Window offset(size_t elements) const {
    return Window{win, offset_bytes + elements * sizeof(T), elements < length ? length - elements : 0};
  }
  WEFT_FN View<T> local() const { return View<T>{(T*)ncclGetLocalPointer(win, offset_bytes), length}; }
  WEFT_FN View<T> lsa(uint32_t peer) const {
    return View<T>{(T*)ncclGetLsaPointer(win, offset_bytes, int(peer)), length};
  }
  WEFT_FN View<T> peer(Team team, uint32_t peer) const {
    return View<T>{(T*)ncclGetPeerPointer(win, offset_bytes, team.nccl(), int(peer)), length};
  }
};

namespace detail {
// Called by every generated entry point on each slice and window parameter (docs/kernel-abi.md): under
// WEFT_ALIGNED_ARGS the host has checked that the argument starts on a 16-byte boundary, and says so to the compiler.
// For a window that is its byte offset; its views' base addresses are read from NCCL's window descriptor in the
// kernel, so pack accesses through them keep an inline, predicated test. (Also asserting the bases aligned made
// the all-reduce kernels 8-12% slower at 16-256 MB on the H200: bench/RESULTS.md, "Argument alignment".)
template <class T>
WEFT_FN void assume_aligned_arg(Slice<T>& s) {
#if WEFT_ALIGNED_ARGS
  s.ptr = static_cast<const T*>(__builtin_assume_aligned(s.ptr, 16));
#else
  (void)s;
#endif
}
template <class T>
WEFT_FN void assume_aligned_arg(SliceMut<T>& s) {
#if WEFT_ALIGNED_ARGS
  s.ptr = static_cast<T*>(__builtin_assume_aligned(s.ptr, 16));
#else
  (void)s;
#endif
}
template <class T>
WEFT_FN void assume_aligned_arg(Window<T>& w) {
#if WEFT_ALIGNED_ARGS
  __builtin_assume((w.offset_bytes & 15) == 0);
#else
  (void)w;
#endif
}
}  // namespace detail

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// LSA barrier sessions (Rust: barrier.rs)
//
// The NCCL session lives in an anonymous union so that end() can run its destructor (epoch write-back, coop sync)
// early; the wrapper's destructor runs it otherwise. Sessions are neither copyable nor movable, like NCCL's;
// DevComm::lsa_barrier returns a prvalue (C++17 guaranteed elision), so `auto bar = dev.lsa_barrier(...)` works.

template <class Co>
struct LsaBarrier {
  using Session = ncclLsaBarrierSession<typename Co::Nccl>;
  union {
    Session s;
  };
  bool ended;

  WEFT_FN LsaBarrier(ncclDevComm const& comm, Co coop, uint32_t index, bool multimem)
      : s(coop.nccl(), comm, ncclTeamTagLsa{}, index, multimem), ended(false) {}
  // Over `team` (unicast), with the communicator's LSA barrier resources: not in the Rust vocabulary. The one-GPU
  // test of the timeout form (tests/cuda/phantom_peer_wait.cu) builds a team with a member that never arrives.
  WEFT_FN LsaBarrier(ncclDevComm const& comm, Co coop, ncclTeam team, uint32_t index)
      : s(coop.nccl(), comm, team, comm.lsaBarrier, index, false, comm.lsaMultimem), ended(false) {}
  LsaBarrier(LsaBarrier const&) = delete;
  LsaBarrier& operator=(LsaBarrier const&) = delete;
  WEFT_FN ~LsaBarrier() {
    if (!ended) s.~Session();
  }

  WEFT_FN void arrive(Co coop, Order order) { s.arrive(coop.nccl(), detail::to_cuda(order)); }
  WEFT_FN void wait(Co coop, Order order) { s.wait(coop.nccl(), detail::to_cuda(order)); }
  WEFT_FN void sync(Co coop, Order order) { s.sync(coop.nccl(), detail::to_cuda(order)); }

  // weft's bounded wait: the inbox words and comparisons of NCCL's wait (lsa_barrier__funcs.h), polled against
  // %globaltimer; the epoch advances only when every thread of the coop saw every peer.
  WEFT_FN BarrierResult wait_timeout(Co coop, Order order, uint64_t timeout_ns) {
    cuda::memory_order acquire = nccl::utility::acquireOrderOf(detail::to_cuda(order));
    uint64_t start = global_timer_ns();
    bool timed_out = false, aborted = false;
    uint32_t steps = 0;
    int const n = s.team.nRanks;
    if (s.multimem) {
      if (coop.thread_rank() == 0) {
        cuda::atomic_ref<uint32_t> inbox(*s.mcInbox(/*multimem=*/false));
#pragma unroll 1
        while (true) {
          uint32_t got = inbox.load(acquire);
          if (got - (s.epoch + uint32_t(n)) <= uint32_t(-1) >> 1) break;
          if (global_timer_ns() - start >= timeout_ns) { timed_out = true; break; }
          if (detail::abort_requested(s.comm, steps)) { aborted = true; break; }
        }
      }
    } else {
#pragma unroll 1
      for (int i = int(coop.thread_rank()); i < n - 1 && !timed_out && !aborted; i += int(coop.size())) {
        int peer = i + (s.team.rank <= i ? 1 : 0);
        cuda::atomic_ref<uint32_t> inbox(*s.ucInbox(s.team.rank, peer));
#pragma unroll 1
        while (true) {
          uint32_t got = inbox.load(acquire);
          if (got - (s.epoch + 1) <= uint32_t(-1) >> 1) break;
          if (global_timer_ns() - start >= timeout_ns) { timed_out = true; break; }
          if (detail::abort_requested(s.comm, steps)) { aborted = true; break; }
        }
      }
    }
    BarrierResult result = detail::coop_result(coop, timed_out, aborted);
    if (result.is_ok()) {
      if (!s.multimem) s.epoch += 1;
      else if (coop.thread_rank() == 0) s.epoch += uint32_t(n);
    }
    coop.sync();
    return result;
  }
  WEFT_FN BarrierResult sync_timeout(Co coop, Order order, uint64_t timeout_ns) {
    arrive(coop, order);
    return wait_timeout(coop, order, timeout_ns);
  }
  WEFT_FN void end() {
    if (!ended) {
      s.~Session();
      ended = true;
    }
  }
};

template <class Co>
WEFT_FN LsaBarrier<Co> DevComm::lsa_barrier(Co coop, uint32_t index) const {
  return LsaBarrier<Co>(*comm_, coop, index, false);
}
template <class Co>
WEFT_FN LsaBarrier<Co> DevComm::lsa_multimem_barrier(Co coop, uint32_t index) const {
  return LsaBarrier<Co>(*comm_, coop, index, true);
}

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Reduce-copy (Rust: reduce_copy.rs). NCCL 2.32's helpers where the headers have them (they need device lambdas:
// --extended-lambda); plain loops over the coop's threads otherwise.

#if WEFT_NCCL_2_32 && defined(__CUDACC_EXTENDED_LAMBDA__)
#define WEFT_NCCL_REDUCE_COPY 1
#else
#define WEFT_NCCL_REDUCE_COPY 0
#endif

namespace detail {
// Types NCCL's reduce-copy packs handle; the others take weft's loops.
template <class T>
struct nccl_reduce_copy_type
    : std::integral_constant<bool, std::is_same<T, float>::value || std::is_same<T, double>::value ||
                                       std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value ||
                                       std::is_same<T, int32_t>::value || std::is_same<T, uint32_t>::value ||
                                       std::is_same<T, int64_t>::value || std::is_same<T, uint64_t>::value> {};

template <class T>
WEFT_FN T* lsa_ptr(ncclWindow_t win, size_t offset_bytes, int peer) {
  return (T*)ncclGetLsaPointer(win, offset_bytes, peer);
}
}  // namespace detail

template <class T, class Co>
WEFT_FN void DevComm::lsa_reduce_sum(Co coop, Window<T> const& src, SliceMut<T> dst, size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLsaReduceSum<T>(coop.nccl(), src.win, src.offset_bytes, dst.ptr, count, *comm_);
  } else
#endif
  {
    int const n = comm_->lsaSize;
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T acc = detail::lsa_ptr<T>(src.win, src.offset_bytes, 0)[i];
      for (int p = 1; p < n; p++) acc = acc + detail::lsa_ptr<T>(src.win, src.offset_bytes, p)[i];
      dst.ptr[i] = acc;
    }
  }
}

template <class T, class Co>
WEFT_FN void DevComm::lsa_copy(Co coop, Slice<T> src, Window<T> const& dst, size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLsaCopy<T>(coop.nccl(), const_cast<T*>(src.ptr), dst.win, dst.offset_bytes, count, *comm_);
  } else
#endif
  {
    int const n = comm_->lsaSize;
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T v = src.ptr[i];
      for (int p = 0; p < n; p++) detail::lsa_ptr<T>(dst.win, dst.offset_bytes, p)[i] = v;
    }
  }
}

template <class T, class Co>
WEFT_FN void DevComm::lsa_reduce_sum_copy(Co coop, Window<T> const& src, Window<T> const& dst, size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLsaReduceSumCopy<T>(coop.nccl(), src.win, src.offset_bytes, dst.win, dst.offset_bytes, count, *comm_);
  } else
#endif
  {
    int const n = comm_->lsaSize;
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T acc = detail::lsa_ptr<T>(src.win, src.offset_bytes, 0)[i];
      for (int p = 1; p < n; p++) acc = acc + detail::lsa_ptr<T>(src.win, src.offset_bytes, p)[i];
      for (int p = 0; p < n; p++) detail::lsa_ptr<T>(dst.win, dst.offset_bytes, p)[i] = acc;
    }
  }
}

template <class T, class Co>
WEFT_FN void local_reduce_sum(Co coop, Slice<T> src, uint32_t src_count, size_t src_stride, SliceMut<T> dst,
                              size_t count) {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLocalReduceSum<T>(coop.nccl(), int(src_count), const_cast<T*>(src.ptr), src_stride, dst.ptr, count);
  } else
#endif
  {
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T acc = src.ptr[i];
      for (uint32_t k = 1; k < src_count; k++) acc = acc + src.ptr[k * src_stride + i];
      dst.ptr[i] = acc;
    }
  }
}

template <class T, class Co>
WEFT_FN void local_copy(Co coop, Slice<T> src, SliceMut<T> dst, uint32_t dst_count, size_t dst_stride, size_t count) {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLocalCopy<T>(coop.nccl(), const_cast<T*>(src.ptr), int(dst_count), dst.ptr, dst_stride, count);
  } else
#endif
  {
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T v = src.ptr[i];
      for (uint32_t k = 0; k < dst_count; k++) dst.ptr[k * dst_stride + i] = v;
    }
  }
}

template <class T, class Co>
WEFT_FN void local_reduce_sum_copy(Co coop, Slice<T> src, uint32_t src_count, size_t src_stride, SliceMut<T> dst,
                                   uint32_t dst_count, size_t dst_stride, size_t count) {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value) {
    ncclLocalReduceSumCopy<T>(coop.nccl(), int(src_count), const_cast<T*>(src.ptr), src_stride, int(dst_count),
                              dst.ptr, dst_stride, count);
  } else
#endif
  {
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) {
      T acc = src.ptr[i];
      for (uint32_t k = 1; k < src_count; k++) acc = acc + src.ptr[k * src_stride + i];
      for (uint32_t k = 0; k < dst_count; k++) dst.ptr[k * dst_stride + i] = acc;
    }
  }
}

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// GIN (Rust: gin.rs)

struct NoAction {};
struct SignalInc {
  uint32_t signal;
  WEFT_FN explicit SignalInc(uint32_t s) : signal(s) {}
};
struct SignalAdd {
  uint32_t signal;
  uint64_t value;
  WEFT_FN SignalAdd(uint32_t s, uint64_t v) : signal(s), value(v) {}
};
struct StrongSignalInc {
  uint32_t signal;
  WEFT_FN explicit StrongSignalInc(uint32_t s) : signal(s) {}
};
struct WeakSignalInc {
  uint32_t signal;
  WEFT_FN explicit WeakSignalInc(uint32_t s) : signal(s) {}
};
struct StrongSignalAdd {
  uint32_t signal;
  uint64_t value;
  WEFT_FN StrongSignalAdd(uint32_t s, uint64_t v) : signal(s), value(v) {}
};
struct WeakSignalAdd {
  uint32_t signal;
  uint64_t value;
  WEFT_FN WeakSignalAdd(uint32_t s, uint64_t v) : signal(s), value(v) {}
};
// VA signals: the u64 at the start of a window. They keep the window's handle and byte offset.
#define WEFT_VA_ACTION(Name)                                                                     \
  struct Name {                                                                                  \
    ncclWindow_t win;                                                                            \
    size_t offset_bytes;                                                                         \
    uint64_t value;                                                                              \
    WEFT_FN explicit Name(Window<uint64_t> const& w) : win(w.win), offset_bytes(w.offset_bytes), value(1) {} \
    WEFT_FN explicit Name(Window<uint64_t> const* w) : Name(*w) {}                              \
    WEFT_FN Name(Window<uint64_t> const& w, uint64_t v) : win(w.win), offset_bytes(w.offset_bytes), value(v) {} \
    WEFT_FN Name(Window<uint64_t> const* w, uint64_t v) : Name(*w, v) {}                        \
  };
WEFT_VA_ACTION(VaSignalInc)
WEFT_VA_ACTION(VaSignalAdd)
WEFT_VA_ACTION(StrongVaSignalInc)
WEFT_VA_ACTION(WeakVaSignalInc)
WEFT_VA_ACTION(StrongVaSignalAdd)
WEFT_VA_ACTION(WeakVaSignalAdd)
#undef WEFT_VA_ACTION
struct CounterInc {
  uint32_t counter;
  WEFT_FN explicit CounterInc(uint32_t c) : counter(c) {}
};
struct WeakCounterInc {
  uint32_t counter;
  WEFT_FN explicit WeakCounterInc(uint32_t c) : counter(c) {}
};

namespace detail {
template <class A>
WEFT_FN auto remote_action(A const& a) {
  if constexpr (std::is_same<A, NoAction>::value) {
    return ncclGin_None{};
  } else if constexpr (std::is_same<A, SignalInc>::value) {
    return ncclGin_SignalInc{a.signal};
  } else if constexpr (std::is_same<A, SignalAdd>::value) {
    return ncclGin_SignalAdd{a.signal, a.value};
#if WEFT_NCCL_2_32
  } else if constexpr (std::is_same<A, StrongSignalInc>::value) {
    return ncclGin_StrongSignalInc{a.signal};
  } else if constexpr (std::is_same<A, WeakSignalInc>::value) {
    return ncclGin_WeakSignalInc{a.signal};
  } else if constexpr (std::is_same<A, StrongSignalAdd>::value) {
    return ncclGin_StrongSignalAdd{a.signal, a.value};
  } else if constexpr (std::is_same<A, WeakSignalAdd>::value) {
    return ncclGin_WeakSignalAdd{a.signal, a.value};
  } else if constexpr (std::is_same<A, VaSignalInc>::value) {
    return ncclGin_VASignalInc{a.win, a.offset_bytes};
  } else if constexpr (std::is_same<A, VaSignalAdd>::value) {
    return ncclGin_VASignalAdd{a.win, a.offset_bytes, a.value};
  } else if constexpr (std::is_same<A, StrongVaSignalInc>::value) {
    return ncclGin_StrongVASignalInc{a.win, a.offset_bytes};
  } else if constexpr (std::is_same<A, WeakVaSignalInc>::value) {
    return ncclGin_WeakVASignalInc{a.win, a.offset_bytes};
  } else if constexpr (std::is_same<A, StrongVaSignalAdd>::value) {
    return ncclGin_StrongVASignalAdd{a.win, a.offset_bytes, a.value};
  } else if constexpr (std::is_same<A, WeakVaSignalAdd>::value) {
    return ncclGin_WeakVASignalAdd{a.win, a.offset_bytes, a.value};
#endif
  } else {
    static_assert(always_false<A>::value,
                  "weft: strong/weak and VA GIN signals need NCCL 2.32 or newer device headers "
                  "(these headers have SignalInc and SignalAdd only)");
    return ncclGin_None{};
  }
}

template <class A>
WEFT_FN auto local_action(A const& a) {
  if constexpr (std::is_same<A, NoAction>::value) {
    return ncclGin_None{};
  } else if constexpr (std::is_same<A, CounterInc>::value) {
    return ncclGin_CounterInc{a.counter};
#if WEFT_NCCL_2_32
  } else if constexpr (std::is_same<A, WeakCounterInc>::value) {
    return ncclGin_WeakCounterInc{a.counter};
#endif
  } else {
    static_assert(always_false<A>::value,
                  "weft: WeakCounterInc needs NCCL 2.32 or newer device headers (these have CounterInc only)");
    return ncclGin_None{};
  }
}

// weft's bounded wait on a GIN signal or counter: thread 0 polls `read()` (NCCL's public readSignal/readCounter)
// with NCCL's rolling comparison; the outcome is shared with the coop.
template <class Co, class Read>
WEFT_FN BarrierResult gin_wait_timeout(Co coop, ncclDevComm const& comm, uint64_t least, int bits,
                                       uint64_t timeout_ns, Read read) {
  coop.sync();
  bool timed_out = false, aborted = false;
  if (coop.thread_rank() == 0) {
    uint64_t start = global_timer_ns();
    uint32_t steps = 0;
#pragma unroll 1
    while (true) {
      if (nccl::utility::rollingLessEq(least, read(), bits)) break;
      if (global_timer_ns() - start >= timeout_ns) { timed_out = true; break; }
      if (abort_requested(comm, steps)) { aborted = true; break; }
    }
  }
  return coop_result(coop, timed_out, aborted);
}
}  // namespace detail

template <class Co>
struct GinBarrier;

// A GIN context (ncclGin). Copyable, like NCCL's: it holds a reference to the kernel's ncclDevComm.
struct GinSession {
  ncclGin g;

  WEFT_FN GinSession(ncclDevComm const& comm, uint32_t context) : g(comm, int(context)) {}

  template <class T, class R, class L, class Co>
  WEFT_FN void put(Team team, uint32_t peer, Window<T> const& dst, Window<T> const& src, size_t count, R remote,
                   L local, Co coop) const {
    g.put(team.nccl(), int(peer), dst.win, dst.offset_bytes, src.win, src.offset_bytes, count * sizeof(T),
          detail::remote_action(remote), detail::local_action(local), coop.nccl());
  }
  template <class T, class R, class Co>
  WEFT_FN void put_value(Team team, uint32_t peer, Window<T> const& dst, detail::no_deduce<T> value, R remote,
                         Co coop) const {
    g.putValue(team.nccl(), int(peer), dst.win, dst.offset_bytes, value, detail::remote_action(remote), coop.nccl());
  }
  template <class R, class Co>
  WEFT_FN void signal(Team team, uint32_t peer, R remote, Co coop) const {
    g.signal(team.nccl(), int(peer), detail::remote_action(remote), coop.nccl());
  }
  template <class T, class Co>
  WEFT_FN void get(Team team, uint32_t peer, Window<T> const& remote, Window<T> const& local, size_t count,
                   Co coop) const {
#if WEFT_NCCL_2_32
    g.get(team.nccl(), int(peer), remote.win, remote.offset_bytes, local.win, local.offset_bytes, count * sizeof(T),
          coop.nccl());
#else
    static_assert(detail::always_false<T>::value, "weft: GinSession::get needs NCCL 2.32 or newer device headers");
#endif
  }
  template <class Co>
  WEFT_FN void flush(Co coop, Order order) const {
    g.flush(coop.nccl(), detail::to_cuda(order));
  }

  WEFT_FN uint64_t read_signal(uint32_t signal) const { return g.readSignal(signal); }
  template <class Co>
  WEFT_FN void wait_signal(Co coop, uint32_t signal, uint64_t least) const {
    g.waitSignal(coop.nccl(), signal, least);
  }
  template <class Co>
  WEFT_FN BarrierResult wait_signal_timeout(Co coop, uint32_t signal, uint64_t least, uint64_t timeout_ns) const {
    ncclGin const& gin = g;
    return detail::gin_wait_timeout(coop, g.comm, least, 64, timeout_ns, [&] { return gin.readSignal(signal); });
  }
  WEFT_FN void reset_signal(uint32_t signal) const { g.resetSignal(signal); }
  WEFT_FN uint64_t signal_shadow(uint32_t signal) const { return *g.getSignalShadowPtr(signal); }
  WEFT_FN void increase_signal_shadow(uint32_t signal, uint64_t delta) const { g.increaseSignalShadow(signal, delta); }
  template <class Co>
  WEFT_FN void wait_signal_meet_shadow(Co coop, uint32_t signal) const {
    g.waitSignalMeetShadow(coop.nccl(), signal);
  }

  // VA signals: 2.32+. Templates so that the static_assert fires only when used.
  template <class W>
  WEFT_FN uint64_t read_va_signal(W const& signal) const {
#if WEFT_NCCL_2_32
    return g.readSignal(signal.win, signal.offset_bytes);
#else
    static_assert(detail::always_false<W>::value, "weft: VA signals need NCCL 2.32 or newer device headers");
    return 0;
#endif
  }
  template <class Co, class W>
  WEFT_FN void wait_va_signal(Co coop, W const& signal, uint64_t least) const {
#if WEFT_NCCL_2_32
    g.waitSignal(coop.nccl(), signal.win, signal.offset_bytes, least);
#else
    static_assert(detail::always_false<W>::value, "weft: VA signals need NCCL 2.32 or newer device headers");
#endif
  }
  template <class W>
  WEFT_FN void reset_va_signal(W const& signal) const {
#if WEFT_NCCL_2_32
    g.resetSignal(signal.win, signal.offset_bytes);
#else
    static_assert(detail::always_false<W>::value, "weft: VA signals need NCCL 2.32 or newer device headers");
#endif
  }

  WEFT_FN uint64_t read_counter(uint32_t counter) const { return g.readCounter(counter); }
  template <class Co>
  WEFT_FN void wait_counter(Co coop, uint32_t counter, uint64_t least) const {
    g.waitCounter(coop.nccl(), counter, least);
  }
  template <class Co>
  WEFT_FN BarrierResult wait_counter_timeout(Co coop, uint32_t counter, uint64_t least, uint64_t timeout_ns) const {
    ncclGin const& gin = g;
    return detail::gin_wait_timeout(coop, g.comm, least, 56, timeout_ns, [&] { return gin.readCounter(counter); });
  }
  WEFT_FN void reset_counter(uint32_t counter) const { g.resetCounter(counter); }

  template <class Co>
  WEFT_FN GinBarrier<Co> rail_barrier(Co coop, uint32_t index) const;
  template <class Co>
  WEFT_FN GinBarrier<Co> world_barrier(Co coop, uint32_t index) const;
};

WEFT_FN GinSession DevComm::gin(uint32_t context) const { return GinSession(*comm_, context); }

namespace detail {
// The fence a GIN barrier applies: 2.28 knows only Relaxed; 2.32's default (Put|Get) makes peers' puts to this
// rank, issued before the barrier, visible after it.
WEFT_FN ncclGinFenceLevel gin_barrier_fence() {
#if WEFT_NCCL_2_32
  return ncclGinFenceLevel::Put | ncclGinFenceLevel::Get;
#else
  return ncclGinFenceLevel::Relaxed;
#endif
}
struct RailTag {};
struct WorldTag {};
}  // namespace detail

template <class Co>
struct GinBarrier {
  using Session = ncclGinBarrierSession<typename Co::Nccl>;
  union {
    Session s;
  };
  bool ended;

  WEFT_FN GinBarrier(ncclGin const& gin, Co coop, uint32_t index, detail::RailTag)
      : s(coop.nccl(), gin, ncclTeamTagRail{}, index), ended(false) {}
#if WEFT_NCCL_2_32
  WEFT_FN GinBarrier(ncclGin const& gin, Co coop, uint32_t index, detail::WorldTag)
      : s(coop.nccl(), gin, ncclTeamTagWorld{}, index), ended(false) {}
#endif
  GinBarrier(GinBarrier const&) = delete;
  GinBarrier& operator=(GinBarrier const&) = delete;
  WEFT_FN ~GinBarrier() {
    if (!ended) s.~Session();
  }

  WEFT_FN void sync(Co coop, Order order) { s.sync(coop.nccl(), detail::to_cuda(order), detail::gin_barrier_fence()); }

  // 2.30.3 and later: NCCL's own bounded sync (clock cycles, converted from ns). 2.28: NCCL's sync
  // (gin_barrier__funcs.h) with its final waitSignal replaced by weft's poll (2.30's session has no epoch to read).
  // Either way, after TimedOut end the session: the signals were sent.
  WEFT_FN BarrierResult sync_timeout(Co coop, Order order, uint64_t timeout_ns) {
#if NCCL_VERSION_CODE >= 23003
    ncclResult_t r =
        s.sync(coop.nccl(), detail::to_cuda(order), detail::gin_barrier_fence(), detail::ns_to_cycles(timeout_ns));
    return detail::coop_result(coop, r != ncclSuccess, false);
#else
    cuda::memory_order ord = detail::to_cuda(order);
    coop.sync();
#pragma unroll 1
    for (int i = int(coop.thread_rank()); i < s.team.nRanks - 1; i += int(coop.size())) {
      int peer = 1 + s.team.rank + i;
      if (s.team.nRanks <= peer) peer -= s.team.nRanks;
      s.net.signal(s.team, peer, ncclGin_SignalInc{s.signal}, ncclCoopThread(), ncclGin_None(),
                   nccl::utility::releaseOrderOf(ord) != cuda::memory_order_relaxed ? cuda::thread_scope_thread
                                                                                    : cuda::thread_scope_system);
    }
    uint32_t target = s.epoch + uint32_t(s.team.nRanks - 1);
    ncclGin const& net = s.net;
    uint32_t signal = s.signal;
    cuda::memory_order acquire = nccl::utility::acquireOrderOf(ord);
    BarrierResult result = detail::gin_wait_timeout(coop, net.comm, target, 32, timeout_ns,
                                                    [&] { return net.readSignal(signal, 32, acquire); });
    if (result.is_ok()) s.epoch = target;
    coop.sync();
    return result;
#endif
  }
  WEFT_FN void end() {
    if (!ended) {
      s.~Session();
      ended = true;
    }
  }
};

template <class Co>
WEFT_FN GinBarrier<Co> GinSession::rail_barrier(Co coop, uint32_t index) const {
  return GinBarrier<Co>(g, coop, index, detail::RailTag{});
}
template <class Co>
WEFT_FN GinBarrier<Co> GinSession::world_barrier(Co coop, uint32_t index) const {
#if WEFT_NCCL_2_32
  return GinBarrier<Co>(g, coop, index, detail::WorldTag{});
#else
  static_assert(detail::always_false<Co>::value, "weft: world GIN barriers need NCCL 2.32 or newer device headers");
  return GinBarrier<Co>(g, coop, index, detail::RailTag{});
#endif
}

// Hybrid barrier: LSA inside the LSA team, then GIN across the rail team (ncclBarrierSession, world tag).
template <class Co>
struct HybridBarrier {
  using Session = ncclBarrierSession<typename Co::Nccl>;
  union {
    Session s;
  };
  bool ended;

  WEFT_FN HybridBarrier(GinSession const& gin, Co coop, uint32_t index)
      : s(coop.nccl(), ncclTeamTagWorld{}, gin.g, index), ended(false) {}
  HybridBarrier(HybridBarrier const&) = delete;
  HybridBarrier& operator=(HybridBarrier const&) = delete;
  WEFT_FN ~HybridBarrier() {
    if (!ended) s.~Session();
  }
  WEFT_FN void sync(Co coop, Order order) { s.sync(coop.nccl(), detail::to_cuda(order), detail::gin_barrier_fence()); }
  WEFT_FN void end() {
    if (!ended) {
      s.~Session();
      ended = true;
    }
  }
};

template <class Co>
WEFT_FN HybridBarrier<Co> DevComm::hybrid_barrier(Co coop, GinSession const& gin, uint32_t index) const {
  return HybridBarrier<Co>(gin, coop, index);
}

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// LL all-to-all (Rust: ll_a2a.rs). The handle is a kernel parameter: NCCL's struct, by value.

// NCCL's handle, by value (the kernel ABI's 8 bytes), behind the accessors of the Rust type (whose fields are private
// there: only the host makes one, so that a kernel never indexes NCCL's resource buffer with a forged handle).
struct LlA2aHandle {
  ncclLLA2AHandle nccl;
  WEFT_FN uint32_t buffer() const { return uint32_t(nccl.bufHandle); }
  WEFT_FN uint32_t slots() const { return nccl.nSlots; }
};
static_assert(sizeof(LlA2aHandle) == 8 && alignof(LlA2aHandle) == 4, "weft::LlA2aHandle is the kernel ABI's 8 bytes");

template <class Co>
struct LlA2a {
  using Session = ncclLLA2ASession<typename Co::Nccl>;
  union {
    Session s;
  };
  bool ended;

  WEFT_FN LlA2a(ncclDevComm const& comm, Co coop, LlA2aHandle handle, uint32_t block, uint32_t max_elements)
      : s(coop.nccl(), comm, ncclTeamLsa(comm), handle.nccl, block, int(max_elements)), ended(false) {}
  LlA2a(LlA2a const&) = delete;
  LlA2a& operator=(LlA2a const&) = delete;
  WEFT_FN ~LlA2a() {
    if (!ended) s.~Session();
  }
  template <class T>
  WEFT_FN void send(uint32_t peer, uint32_t slot, T value) {
    s.send(int(peer), int(slot), value);
  }
  template <class T>
  WEFT_FN void broadcast(uint32_t slot, T value) {
    s.bcast(int(slot), value);
  }
  template <class T>
  WEFT_FN T recv(uint32_t slot) {
    return s.template recv<T>(int(slot));
  }
  WEFT_FN void end_epoch(Co coop) { s.endEpoch(coop.nccl()); }
  // The peers `send` may name (the LSA team's size): the bound of its device check (detail::resource_at).
  WEFT_FN uint32_t team_size() const { return uint32_t(s.team.nRanks); }
  WEFT_FN void end() {
    if (!ended) {
      s.~Session();
      ended = true;
    }
  }
};

template <class Co>
WEFT_FN LlA2a<Co> DevComm::ll_a2a(Co coop, LlA2aHandle handle, uint32_t block, uint32_t max_elements) const {
  return LlA2a<Co>(*comm_, coop, handle, block, max_elements);
}

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Multimem (Rust: multimem.rs): multicast addresses on the LSA team and the multimem.* instructions (sm_90+).
// There are no 16-bit scalar multimem instructions: a 16-bit load-reduce reads the aligned pair and keeps its half,
// a 16-bit reduction adds -0.0 (the additive identity) to the neighbour; 16-bit stores are not offered.

namespace detail {
WEFT_FN float mm_ld_reduce(float const* p) {
  float v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
  return v;
}
WEFT_FN double mm_ld_reduce(double const* p) {
  double v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f64 %0, [%1];" : "=d"(v) : "l"(p) : "memory");
  return v;
}
WEFT_FN int32_t mm_ld_reduce(int32_t const* p) {
  int32_t v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
WEFT_FN uint32_t mm_ld_reduce(uint32_t const* p) {
  uint32_t v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
WEFT_FN uint64_t mm_ld_reduce(uint64_t const* p) {
  uint64_t v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
template <class H>
WEFT_FN H mm_half_select(uint32_t pair, uintptr_t addr) {
  unsigned short bits = (unsigned short)((addr & 2) ? (pair >> 16) : (pair & 0xffffu));
  H h;
  memcpy(&h, &bits, 2);
  return h;
}
WEFT_FN __half mm_ld_reduce(__half const* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t pair;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.f16x2 %0, [%1];"
               : "=r"(pair)
               : "l"(a & ~uintptr_t(3))
               : "memory");
  return mm_half_select<__half>(pair, a);
}
WEFT_FN __nv_bfloat16 mm_ld_reduce(__nv_bfloat16 const* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t pair;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.acc::f32.bf16x2 %0, [%1];"
               : "=r"(pair)
               : "l"(a & ~uintptr_t(3))
               : "memory");
  return mm_half_select<__nv_bfloat16>(pair, a);
}

WEFT_FN void mm_st(float* p, float v) { asm volatile("multimem.st.relaxed.sys.global.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory"); }
WEFT_FN void mm_st(double* p, double v) { asm volatile("multimem.st.relaxed.sys.global.f64 [%0], %1;" ::"l"(p), "d"(v) : "memory"); }
WEFT_FN void mm_st(int32_t* p, int32_t v) { asm volatile("multimem.st.relaxed.sys.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
WEFT_FN void mm_st(uint32_t* p, uint32_t v) { asm volatile("multimem.st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
WEFT_FN void mm_st(uint64_t* p, uint64_t v) { asm volatile("multimem.st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }

WEFT_FN void mm_red(float* p, float v) { asm volatile("multimem.red.relaxed.sys.global.add.f32 [%0], %1;" ::"l"(p), "f"(v) : "memory"); }
WEFT_FN void mm_red(double* p, double v) { asm volatile("multimem.red.relaxed.sys.global.add.f64 [%0], %1;" ::"l"(p), "d"(v) : "memory"); }
WEFT_FN void mm_red(int32_t* p, int32_t v) { asm volatile("multimem.red.relaxed.sys.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
WEFT_FN void mm_red(uint32_t* p, uint32_t v) { asm volatile("multimem.red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
WEFT_FN void mm_red(uint64_t* p, uint64_t v) { asm volatile("multimem.red.relaxed.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
template <class H>
WEFT_FN uint32_t mm_half_pair(H v, uintptr_t addr) {
  unsigned short bits;
  memcpy(&bits, &v, 2);
  uint32_t neg_zero = 0x8000u;
  return (addr & 2) ? ((uint32_t(bits) << 16) | neg_zero) : ((neg_zero << 16) | bits);
}
WEFT_FN void mm_red(__half* p, __half v) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  asm volatile("multimem.red.relaxed.sys.global.add.f16x2 [%0], %1;" ::"l"(a & ~uintptr_t(3)), "r"(mm_half_pair(v, a))
               : "memory");
}
WEFT_FN void mm_red(__nv_bfloat16* p, __nv_bfloat16 v) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  asm volatile("multimem.red.relaxed.sys.global.add.bf16x2 [%0], %1;" ::"l"(a & ~uintptr_t(3)), "r"(mm_half_pair(v, a))
               : "memory");
}
}  // namespace detail

template <class T>
struct MultimemView {
  T* mc;
  size_t length;
  WEFT_FN size_t len() const { return length; }
  WEFT_FN bool is_empty() const { return length == 0; }
  WEFT_FN T load_reduce_sum(size_t i) const { return detail::mm_ld_reduce(mc + i); }
  WEFT_FN void store(size_t i, T v) const { detail::mm_st(mc + i, v); }
  WEFT_FN void reduce_add(size_t i, T v) const { detail::mm_red(mc + i, v); }
};

template <class T>
WEFT_FN MultimemView<T> DevComm::lsa_multimem(Window<T> const& w) const {
  return MultimemView<T>{(T*)ncclGetLsaMultimemPointer(w.win, w.offset_bytes, *comm_), w.length};
}

template <class T, class Co>
WEFT_FN void DevComm::multimem_reduce_sum(Co coop, Window<T> const& src, SliceMut<T> dst, size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value && !std::is_integral<T>::value) {
    ncclMultimemReduceSum<T>(coop.nccl(), src.win, src.offset_bytes, dst.ptr, count, comm_->lsaMultimem);
  } else
#endif
  {
    MultimemView<T> mv = lsa_multimem(src);
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) dst.ptr[i] = mv.load_reduce_sum(i);
  }
}

#define WEFT_MULTIMEM_STORE_16_MESSAGE                                                                          \
  "weft: multimem stores of 16-bit elements need NCCL 2.32 or newer device headers (the hardware has no 16-bit " \
  "multimem store; NCCL's helper stores pairs)"

template <class T, class Co>
WEFT_FN void DevComm::multimem_copy(Co coop, Slice<T> src, Window<T> const& dst, size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value && !std::is_integral<T>::value) {
    ncclMultimemCopy<T>(coop.nccl(), const_cast<T*>(src.ptr), dst.win, dst.offset_bytes, count, comm_->lsaMultimem);
  } else
#endif
  if constexpr (sizeof(T) >= 4) {
    MultimemView<T> mv = lsa_multimem(dst);
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) mv.store(i, src.ptr[i]);
  } else {
    static_assert(detail::always_false<T>::value, WEFT_MULTIMEM_STORE_16_MESSAGE);
  }
}

template <class T, class Co>
WEFT_FN void DevComm::multimem_reduce_sum_copy(Co coop, Window<T> const& src, Window<T> const& dst,
                                               size_t count) const {
#if WEFT_NCCL_REDUCE_COPY
  if constexpr (detail::nccl_reduce_copy_type<T>::value && !std::is_integral<T>::value) {
    ncclMultimemReduceSumCopy<T>(coop.nccl(), src.win, src.offset_bytes, comm_->lsaMultimem, dst.win,
                                 dst.offset_bytes, comm_->lsaMultimem, count);
  } else
#endif
  if constexpr (sizeof(T) >= 4) {
    MultimemView<T> in = lsa_multimem(src);
    MultimemView<T> out = lsa_multimem(dst);
#pragma unroll 1
    for (size_t i = coop.thread_rank(); i < count; i += coop.size()) out.store(i, in.load_reduce_sum(i));
  } else {
    static_assert(detail::always_false<T>::value, WEFT_MULTIMEM_STORE_16_MESSAGE);
  }
}

////////////////////////////////////////////////////////////////////////////////////////////////////////////////////
// Checked accesses (see WEFT_BOUNDS_CHECKS above). Each takes the access's operands and the Rust line it was written
// on; a failed check prints them and traps, the kernel's equivalent of a Rust panic on an out-of-bounds index.

namespace detail {

// Fills the trap report (see WeftTrapReport) if the host set one and no thread of this module has yet, and returns
// once it is complete: a thread that traps ends the whole kernel, so the threads that lost the claim wait for the
// one writing the report (claim 1: writing, 2: written) before they trap. No function call.
WEFT_FN void trap_report(unsigned kind, unsigned line, unsigned code, unsigned long long a, unsigned long long b) {
  WeftTrapReport* r = weft_trap_target.report;
  if (r == nullptr) return;
  if (atomicCAS(&weft_trap_claim, 0u, 1u) != 0u) {
    // Bounded (about half a second), in case the writer never finishes: a trap must not turn into a hang.
    long long start = clock64();
    while (*static_cast<volatile unsigned int*>(&weft_trap_claim) != 2u && clock64() - start < (1ll << 30)) {
    }
    return;
  }
  volatile WeftTrapReport* v = r;
  v->kind = kind;
  v->line = line;
  v->code = code;
  v->a = a;
  v->b = b;
  v->module = weft_trap_target.module;
  v->block[0] = blockIdx.x, v->block[1] = blockIdx.y, v->block[2] = blockIdx.z;
  v->thread[0] = threadIdx.x, v->thread[1] = threadIdx.y, v->thread[2] = threadIdx.z;
  // Everything above reaches host memory before `state` says it is complete.
  __threadfence_system();
  v->state = 2u;
  __threadfence_system();
  atomicExch(&weft_trap_claim, 2u);
}

#if WEFT_TRAP_PRINTS
__device__ __noinline__ inline void out_of_bounds(unsigned line, unsigned long long index, unsigned long long limit) {
  trap_report(1, line, 0, index, limit);
  printf("weft: out-of-bounds access at line %u of the kernel's source: %llu is not below %llu\n", line, index, limit);
  __trap();
}
#else
__device__ __noinline__ inline void out_of_bounds(unsigned line, unsigned long long index, unsigned long long limit) {
  trap_report(1, line, 0, index, limit);
  __trap();
}
#endif

// `index < limit`, or trap.
WEFT_FN void check_below(size_t index, size_t limit, unsigned line) {
#if WEFT_BOUNDS_CHECKS
  if (__builtin_expect(!(index < limit), 0)) out_of_bounds(line, index, limit);
#else
  (void)index;
  (void)limit;
  (void)line;
#endif
}

// A resource index the macro could not follow (a barrier, GIN signal, counter or context, LL all-to-all block or
// slot) below the count its function declared (`#[kernel(lsa_barriers = 8)]`), or an LL all-to-all peer below the
// team's size: the index itself, or a trap.
template <class I>
WEFT_FN I resource_at(I index, size_t bound, unsigned line) {
  check_below(size_t(index), bound, line);
  return index;
}

// `x[i]` on a slice, view or shared array (a reference, so it can be assigned and passed to atomics).
template <class C>
WEFT_FN decltype(auto) at(C&& c, size_t i, unsigned line) {
  check_below(i, c.len(), line);
  return c[i];
}

// Packs: pack `p` covers elements `p * LANES .. (p + 1) * LANES`.
template <class C>
WEFT_FN auto load_pack_at(C const& c, size_t p, unsigned line) {
  using P = decltype(c.load_pack(p));
  check_below(p, c.len() / P::LANES, line);
  return c.load_pack(p);
}
template <class C, class P>
WEFT_FN void store_pack_at(C const& c, size_t p, P const& value, unsigned line) {
  check_below(p, c.len() / P::LANES, line);
  c.store_pack(p, value);
}
template <class C, class P>
WEFT_FN void lamport_store_pack_at(C const& c, size_t p, P const& value, unsigned line) {
  check_below(p, c.len() / P::LANES, line);
  c.lamport_store_pack(p, value);
}
template <class C>
WEFT_FN void lamport_clear_pack_at(C const& c, size_t p, unsigned line) {
  using P = decltype(c.load_pack(p));
  check_below(p, c.len() / P::LANES, line);
  c.lamport_clear_pack(p);
}
template <class C>
WEFT_FN auto lamport_wait_pack_at(C const& c, size_t p, uint64_t deadline_ns, unsigned line) {
  using P = decltype(c.load_pack(p));
  check_below(p, c.len() / P::LANES, line);
  return c.lamport_wait_pack(p, deadline_ns);
}
template <class U, class C>
WEFT_FN WidePack<U> load_wide_at(C const& c, size_t p, unsigned line) {
  check_below(p, c.len() / WidePack<U>::LANES, line);
  return c.template load_wide<U>(p);
}
template <class C, class U>
WEFT_FN void store_wide_at(C const& c, size_t p, WidePack<U> const& value, unsigned line) {
  check_below(p, c.len() / WidePack<U>::LANES, line);
  c.store_wide(p, value);
}

// `&x[a..b]`: `a <= b <= len`.
template <class C>
WEFT_FN auto subslice_at(C const& c, size_t start, size_t end, unsigned line) {
  check_below(end, c.len() + 1, line);
  check_below(start, end + 1, line);
  return c.subslice(start, end);
}

// A window's views: the peer within its team.
template <class T>
WEFT_FN View<T> lsa_at(Window<T> const& w, uint32_t peer, unsigned line, DevComm const& dev) {
  check_below(peer, dev.lsa_size(), line);
  return w.lsa(peer);
}
// `w.peer(team, p)` reads the peer's memory through the LSA team's mapping (ncclGetPeerPointer), so the peer must be
// in the team and in this rank's LSA team: its LSA index, computed as NCCL does, below the LSA team's size.
template <class T>
WEFT_FN View<T> peer_at(Window<T> const& w, Team team, uint32_t peer, unsigned line, DevComm const& dev) {
  check_below(peer, team.nranks, line);
  long long lsa = (long long)(w.win->lsaRank) + ((long long)(peer) - (long long)(team.rank)) * (long long)(team.stride);
  check_below(size_t(lsa), dev.lsa_size(), line);
  return w.peer(team, peer);
}

// A `rows x cols` tile at (row0, col0) of a row-major matrix with `ld` elements per row, inside a buffer of `len`
// elements: every index the tile touches is below `len` (no arithmetic here can wrap).
WEFT_FN void check_tile(size_t len, size_t ld, size_t row0, size_t col0, size_t rows, size_t cols, unsigned line) {
  check_below(0, ld, line);            // a row has elements
  check_below(col0, ld, line);         // the tile starts inside a row
  check_below(cols - 1, ld - col0, line);
  size_t whole_rows = ld ? len / ld : 0;
  check_below(row0, whole_rows, line);
  check_below(rows - 1, whole_rows - row0, line);
}

// Fragment loads and the accumulator's store from any container with `operator[]` and `len()` (slices, views,
// shared arrays); the `_at` forms check the whole tile first (the macro emits them: these accesses are never
// proven at launch).
template <class C>
WEFT_FN auto mma_load_a_at(C const& c, size_t row0, size_t col0, size_t ld, unsigned line) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(c[0])>>;
  check_tile(c.len(), ld, row0, col0, 16, 16, line);
  uint32_t l = lane_id(), g = l / 4, t = l % 4;
  MmaA<T> a;
  size_t top = (row0 + g) * ld + col0 + 2 * t, bottom = top + 8 * ld;
  a.r[0] = pair_bits(c[top], c[top + 1]);
  a.r[1] = pair_bits(c[bottom], c[bottom + 1]);
  a.r[2] = pair_bits(c[top + 8], c[top + 9]);
  a.r[3] = pair_bits(c[bottom + 8], c[bottom + 9]);
  return a;
}
template <class C>
WEFT_FN auto mma_load_b_at(C const& c, size_t k0, size_t n0, size_t ld, unsigned line) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(c[0])>>;
  check_tile(c.len(), ld, k0, n0, 16, 8, line);
  uint32_t l = lane_id(), g = l / 4, t = l % 4;
  MmaB<T> b;
  size_t k = k0 + 2 * t, n = n0 + g;
  b.r[0] = pair_bits(c[k * ld + n], c[(k + 1) * ld + n]);
  b.r[1] = pair_bits(c[(k + 8) * ld + n], c[(k + 9) * ld + n]);
  return b;
}
// One `ldmatrix.x4` (optionally `.trans`) from the shared-memory row at `address` this lane names: four 8 x 8
// matrices, one register each (the fragment loads below and the GEMM mainloops).
WEFT_FN void ldmatrix_x4_at(uint32_t address, uint32_t* r, bool trans) {
  if (trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  }
}
template <bool TRANS, class T>
WEFT_FN void ldmatrix_x4(const T* row, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  uint32_t r[4];
  ldmatrix_x4_at(static_cast<uint32_t>(__cvta_generic_to_shared(row)), r, TRANS);
  r0 = r[0], r1 = r[1], r2 = r[2], r3 = r[3];
}
// `ldmatrix`: the same fragments from a shared array, four (A) or two (B, transposed) 8 x 8 matrices per
// instruction, each lane giving one row's address. Rows start on 16-byte boundaries: `ld` and the tile's column
// must be multiples of 8 elements (checked with the tile).
template <class T, size_t N>
WEFT_FN MmaA<T> mma_ldmatrix_a_at(SharedArray<T, N> const& s, size_t row0, size_t col0, size_t ld, unsigned line) {
  check_tile(N, ld, row0, col0, 16, 16, line);
  check_below(ld % 8 + col0 % 8, 1, line);  // 16-byte rows
  uint32_t l = lane_id();
  MmaA<T> a;
  ldmatrix_x4<false>(&s.data[(row0 + l % 16) * ld + col0 + (l / 16) * 8], a.r[0], a.r[1], a.r[2], a.r[3]);
  return a;
}
template <class T, size_t N>
WEFT_FN MmaB<T> mma_ldmatrix_b_at(SharedArray<T, N> const& s, size_t k0, size_t n0, size_t ld, unsigned line) {
  check_tile(N, ld, k0, n0, 16, 8, line);
  check_below(ld % 8 + n0 % 8, 1, line);  // 16-byte rows
  uint32_t l = lane_id();
  // Lanes 0-15 name rows k0..k0+15 (the two matrices); the others' addresses are not used but stay in the tile.
  const T* row = &s.data[(k0 + l % 16) * ld + n0];
  uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  MmaB<T> b;
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(b.r[0]), "=r"(b.r[1]) : "r"(address));
  return b;
}
// The same under the Rust methods' names (without a line to report: the macro emits the `_at` forms).
template <class T, size_t N>
WEFT_FN MmaA<T> mma_ldmatrix_a(SharedArray<T, N> const& s, size_t row0, size_t col0, size_t ld) {
  return mma_ldmatrix_a_at(s, row0, col0, ld, 0);
}
template <class T, size_t N>
WEFT_FN MmaB<T> mma_ldmatrix_b(SharedArray<T, N> const& s, size_t k0, size_t n0, size_t ld) {
  return mma_ldmatrix_b_at(s, k0, n0, ld, 0);
}
template <class C>
WEFT_FN void mma_store_at(C&& c, MmaAcc const& acc, size_t row0, size_t col0, size_t ld, unsigned line) {
  check_tile(c.len(), ld, row0, col0, 16, 8, line);
  uint32_t l = lane_id(), g = l / 4, t = l % 4;
  size_t top = (row0 + g) * ld + col0 + 2 * t, bottom = top + 8 * ld;
  c[top] = acc.c[0];
  c[top + 1] = acc.c[1];
  c[bottom] = acc.c[2];
  c[bottom + 1] = acc.c[3];
}

// A pack's lane.
template <class P>
WEFT_FN auto lane_at(P const& pack, size_t k, unsigned line) {
  check_below(k, P::LANES, line);
  return pack.lane(k);
}

// Multimem views.
template <class T>
WEFT_FN T load_reduce_sum_at(MultimemView<T> const& v, size_t i, unsigned line) {
  check_below(i, v.len(), line);
  return v.load_reduce_sum(i);
}
template <class T, class V>
WEFT_FN void reduce_add_at(MultimemView<T> const& v, size_t i, V value, unsigned line) {
  check_below(i, v.len(), line);
  v.reduce_add(i, value);
}
template <class T, class V>
WEFT_FN void store_at(MultimemView<T> const& v, size_t i, V value, unsigned line) {
  check_below(i, v.len(), line);
  v.store(i, value);
}

// GIN: the peer within the team, and `count` elements within both windows.
template <class T, class R, class L, class Co>
WEFT_FN void put_at(GinSession const& gin, Team team, uint32_t peer, Window<T> const& dst, Window<T> const& src,
                    size_t count, R remote, L local, Co coop, unsigned line) {
  check_below(peer, team.nranks, line);
  check_below(count, dst.len() + 1, line);
  check_below(count, src.len() + 1, line);
  gin.put(team, peer, dst, src, count, remote, local, coop);
}
template <class T, class V, class R, class Co>
WEFT_FN void put_value_at(GinSession const& gin, Team team, uint32_t peer, Window<T> const& dst, V value, R remote,
                          Co coop, unsigned line) {
  check_below(peer, team.nranks, line);
  check_below(0, dst.len(), line);
  gin.put_value(team, peer, dst, value, remote, coop);
}
template <class R, class Co>
WEFT_FN void signal_at(GinSession const& gin, Team team, uint32_t peer, R remote, Co coop, unsigned line) {
  check_below(peer, team.nranks, line);
  gin.signal(team, peer, remote, coop);
}
template <class T, class Co>
WEFT_FN void get_at(GinSession const& gin, Team team, uint32_t peer, Window<T> const& remote, Window<T> const& local,
                    size_t count, Co coop, unsigned line) {
  check_below(peer, team.nranks, line);
  check_below(count, remote.len() + 1, line);
  check_below(count, local.len() + 1, line);
  gin.get(team, peer, remote, local, count, coop);
}
template <class W>
WEFT_FN uint64_t read_va_signal_at(GinSession const& gin, W const& signal, unsigned line) {
  check_below(0, signal.len(), line);
  return gin.read_va_signal(signal);
}
template <class Co, class W>
WEFT_FN void wait_va_signal_at(GinSession const& gin, Co coop, W const& signal, uint64_t least, unsigned line) {
  check_below(0, signal.len(), line);
  gin.wait_va_signal(coop, signal, least);
}
template <class W>
WEFT_FN void reset_va_signal_at(GinSession const& gin, W const& signal, unsigned line) {
  check_below(0, signal.len(), line);
  gin.reset_va_signal(signal);
}

// Reduce-copy: `count` elements within the source and the destination (every peer's window is as long as this
// rank's: windows are registered symmetrically).
#define WEFT_CHECKED_COPY(name)                                                                 \
  template <class Co, class S, class D>                                                         \
  WEFT_FN void name##_at(DevComm const& dev, Co coop, S const& src, D const& dst, size_t count, \
                         unsigned line) {                                                       \
    check_below(count, src.len() + 1, line);                                                    \
    check_below(count, dst.len() + 1, line);                                                    \
    dev.name(coop, src, dst, count);                                                            \
  }
WEFT_CHECKED_COPY(lsa_reduce_sum)
WEFT_CHECKED_COPY(lsa_copy)
WEFT_CHECKED_COPY(lsa_reduce_sum_copy)
WEFT_CHECKED_COPY(multimem_reduce_sum)
WEFT_CHECKED_COPY(multimem_copy)
WEFT_CHECKED_COPY(multimem_reduce_sum_copy)
#undef WEFT_CHECKED_COPY

// Local reduce-copy: every strided run within its slice.
WEFT_FN void check_runs(size_t runs, size_t stride, size_t count, size_t len, unsigned line) {
  if (runs == 0) return;
  check_below(count, len + 1, line);
  check_below(runs - 1, stride == 0 ? ~size_t(0) : (len - count) / stride + 1, line);
}
template <class T, class Co>
WEFT_FN void local_reduce_sum_at(Co coop, Slice<T> src, uint32_t src_count, size_t src_stride, SliceMut<T> dst,
                                 size_t count, unsigned line) {
  check_runs(src_count, src_stride, count, src.len(), line);
  check_below(count, dst.len() + 1, line);
  local_reduce_sum(coop, src, src_count, src_stride, dst, count);
}
template <class T, class Co>
WEFT_FN void local_copy_at(Co coop, Slice<T> src, SliceMut<T> dst, uint32_t dst_count, size_t dst_stride,
                           size_t count, unsigned line) {
  check_below(count, src.len() + 1, line);
  check_runs(dst_count, dst_stride, count, dst.len(), line);
  local_copy(coop, src, dst, dst_count, dst_stride, count);
}
template <class T, class Co>
WEFT_FN void local_reduce_sum_copy_at(Co coop, Slice<T> src, uint32_t src_count, size_t src_stride, SliceMut<T> dst,
                                      uint32_t dst_count, size_t dst_stride, size_t count, unsigned line) {
  check_runs(src_count, src_stride, count, src.len(), line);
  check_runs(dst_count, dst_stride, count, dst.len(), line);
  local_reduce_sum_copy(coop, src, src_count, src_stride, dst, dst_count, dst_stride, count);
}


// The block GEMM mainloop behind `a.gemm_block(row0, lda, b, col0, ldb, k)` (gemm.rs): the 128 x 128 tile
// a[row0.., 0..k] x b[0..k, col0..] of row-major operands, accumulated in f32 with mma.sync m16n8k16. Tiles of
// k = 32 stream through GEMM_STAGES shared-memory stages with cp.async (16 bytes per copy, 2 per thread and
// operand), so the next tiles load while this one multiplies; each stage is stored swizzled (the 16-byte chunk
// index XOR the row's low bits) so that the ldmatrix reads of eight rows hit eight different bank groups.
// Preconditions, checked on every call (a failed one traps with the kernel's line): the block has exactly 256
// threads, every thread of the block calls it together (it synchronises the block), k is a multiple of 32, lda and
// ldb are multiples of 8 and both operands start on 16-byte boundaries (cp.async copies 16 bytes), and both tiles
// lie inside their buffers.
constexpr int GEMM_STAGES = 3;
constexpr int GEMM_BK = 32;

// The rules gemm_check enforces, by code (the host's copy, host/src/trap.rs, is checked against these lines).
WEFT_FN const char* gemm_misuse_text(unsigned code) {
  switch (code) {
    case 0: return "launch it with blocks of exactly 256 threads in x (8 warps)";
    case 1: return "k must be a positive multiple of 32";
    case 2: return "lda and ldb must be multiples of 8 (16-byte rows)";
    case 3: return "both operands must start on a 16-byte boundary";
    case 4: return "col0 must be a multiple of 8 (16-byte rows)";
    default: return "a tile lies outside its operand: a needs rows row0..row0+128 of lda >= k elements, b needs k rows of ldb >= col0 + 128 elements";
  }
}

#if WEFT_TRAP_PRINTS
__device__ __noinline__ inline void gemm_misuse(unsigned line, unsigned code) {
  trap_report(2, line, code, 0, 0);
  printf("weft: gemm_block at line %u of the kernel's source: %s\n", line, gemm_misuse_text(code));
  __trap();
}
#else
__device__ __noinline__ inline void gemm_misuse(unsigned line, unsigned code) {
  trap_report(2, line, code, 0, 0);
  __trap();
}
#endif

// 16 bytes from global memory to the shared-memory address `dst`, asynchronously (cp.async.cg), from a global-space
// address (what __cvta_generic_to_global gives), or from a generic pointer.
WEFT_FN void cp_async_16_global(uint32_t dst, uint64_t global_src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src));
}
WEFT_FN void cp_async_16_to(uint32_t dst, const void* global_src) {
  cp_async_16_global(dst, __cvta_generic_to_global(global_src));
}
WEFT_FN void cp_async_16(void* shared_dst, const void* global_src) {
  cp_async_16_to(static_cast<uint32_t>(__cvta_generic_to_shared(shared_dst)), global_src);
}
WEFT_FN void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int N>
WEFT_FN void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

// WEFT_GEMM_USES_WGMMA (top of this file) picks the wgmma mainloop; without it, the mma.sync one. Both share the
// pipeline below and A's stage layout; B's stage layout and one stage's MMAs (gemm_stage) differ.

// One thread's copies of each k-tile into a stage (a and b already at row0 and col0). A: 128 rows of 4 16-byte chunks
// (32 elements), chunk c of row r at c ^ ((r >> 1) & 3). B, for mma.sync: 32 rows of 16 chunks (128 elements), chunk
// c of row r at c ^ (r & 7); for wgmma: four 32-column atoms of 1024 elements, k-row r of an atom in 32 elements with
// A's chunk swizzle. Thread t copies chunk t % 4 of A's rows t / 4 and t / 4 + 64, and chunk t % 16 of B's k-rows
// t / 16 and t / 16 + 16: rows that far apart have the same swizzle, so a thread's places in a stage are two constants
// and its sources move one k-tile on per load. Worked out once here, not copy by copy: that index arithmetic (64-bit,
// with a division by the stage count) was about 90 of the 165 instructions of the mma.sync loop's k-tile around its
// 32 MMAs (sm_90a SASS, 2026-12-06).
template <class T>
struct GemmCopies {
  // Element offsets in a stage of this thread's first A and B chunks; their sources for the next k-tile to load; and
  // the element distances to the second chunks' sources (64 rows of A, 16 k-rows of B) and from one k-tile of B to
  // the next.
  uint32_t a_to, b_to;
  const T* a_from;
  const T* b_from;
  size_t a_second, b_second, b_ktile;

  WEFT_FN GemmCopies(const T* a, size_t lda, const T* b, size_t ldb) {
    const uint32_t tid = threadIdx.x, ar = tid / 4, ac = tid % 4, br = tid / 16, bc = tid % 16;
    a_to = ar * 32 + ((ac ^ ((ar >> 1) & 3)) * 8);
#if defined(WEFT_GEMM_USES_WGMMA)
    b_to = (bc / 4) * 1024 + br * 32 + (((bc % 4) ^ ((br >> 1) & 3)) * 8);
#else
    b_to = br * 128 + ((bc ^ (br & 7)) * 8);
#endif
    a_from = a + ar * lda + ac * 8;
    b_from = b + br * ldb + bc * 8;
    a_second = 64 * lda;
    b_second = 16 * ldb;
    b_ktile = GEMM_BK * ldb;
  }

  // The next k-tile's four copies into the stage (sa, sb).
  WEFT_FN void load(T* sa, T* sb) {
#if defined(WEFT_GEMM_USES_WGMMA)
    constexpr uint32_t B_SECOND = 16 * 32;
#else
    constexpr uint32_t B_SECOND = 16 * 128;
#endif
    cp_async_16(sa + a_to, a_from);
    cp_async_16(sa + a_to + 64 * 32, a_from + a_second);
    cp_async_16(sb + b_to, b_from);
    cp_async_16(sb + b_to + B_SECOND, b_from + b_second);
    a_from += GEMM_BK;
    b_from += b_ktile;
  }
};

// The preconditions of both mainloops (comment above).
template <class CA, class CB>
WEFT_FN void gemm_check(CA const& ca, size_t row0, size_t lda, CB const& cb, size_t col0, size_t ldb, size_t k,
                        unsigned line) {
  // Memory safety does not depend on the bounds-check form: a wrong block size would index shared memory out of
  // its stages, so these are checked in every form.
  if (blockDim.x * blockDim.y * blockDim.z != 256 || blockDim.y != 1 || blockDim.z != 1) gemm_misuse(line, 0);
  if (k == 0 || k % GEMM_BK != 0) gemm_misuse(line, 1);
  if (lda % 8 != 0 || ldb % 8 != 0) gemm_misuse(line, 2);
  if (reinterpret_cast<uintptr_t>(ca.as_ptr()) % 16 != 0 || reinterpret_cast<uintptr_t>(cb.as_ptr()) % 16 != 0)
    gemm_misuse(line, 3);
  if (col0 % 8 != 0) gemm_misuse(line, 4);
  // (Ordered so that nothing divides by zero or wraps: k > 0 makes lda > 0, and ldb - col0 >= 128 makes ldb > 0.)
  if (!(lda >= k && ca.len() / lda >= 128 && ca.len() / lda - 128 >= row0 && ldb >= col0 && ldb - col0 >= 128 &&
        cb.len() / ldb >= k))
    gemm_misuse(line, 5);
}

WEFT_FN uint32_t shared_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }
// A wgmma matrix descriptor of the shared-memory matrix at `address`: start address, leading and stride byte offsets
// in 16-byte units, and the layout type (1: 128-byte swizzle, 2: 64-byte swizzle).
WEFT_FN uint64_t smem_matrix_desc(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes, uint64_t layout) {
  return ((address & 0x3FFFF) >> 4) | (uint64_t((leading_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((stride_bytes >> 4) & 0x3FFF) << 32) | (layout << 62);
}

#if defined(WEFT_GEMM_USES_WGMMA)
// Hopper's warpgroup MMA reads both operands from shared memory through descriptors. Two warpgroups, each a 64 x 128
// half of the tile: per k step of 16, one wgmma.mma_async.m64n128k16 per warpgroup. The stages hold the canonical
// 64-byte-swizzle layouts the descriptors describe (A K-major, B N-major and transposed by the instruction); the
// swizzle is applied by the hardware to address bits, so the stages are 1024-byte aligned.
WEFT_FN uint64_t wgmma_desc(const void* smem, uint32_t leading_bytes, uint32_t stride_bytes) {
  return smem_matrix_desc(shared_u32(smem), leading_bytes, stride_bytes, 2);
}
// Keeps the compiler from moving accumulator reads or writes across the asynchronous MMA.
WEFT_FN void wgmma_fence_operands(GemmTile& t) {
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(t.acc[j / 4][j % 4].c[e])::"memory");
}
// d (the warpgroup's 64 x 128 f32, this thread's 64 values) += A (64 x 16) x B (16 x 128), B N-major.
#define WEFT_WGMMA_M64N128K16(TYPE)                                                                          \
  asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 1;" \
               : "+f"(t.acc[0][0].c[0]), "+f"(t.acc[0][0].c[1]), "+f"(t.acc[0][0].c[2]), "+f"(t.acc[0][0].c[3]), "+f"(t.acc[0][1].c[0]), "+f"(t.acc[0][1].c[1]), "+f"(t.acc[0][1].c[2]), "+f"(t.acc[0][1].c[3]), "+f"(t.acc[0][2].c[0]), "+f"(t.acc[0][2].c[1]), "+f"(t.acc[0][2].c[2]), "+f"(t.acc[0][2].c[3]), "+f"(t.acc[0][3].c[0]), "+f"(t.acc[0][3].c[1]), "+f"(t.acc[0][3].c[2]), "+f"(t.acc[0][3].c[3]), "+f"(t.acc[1][0].c[0]), "+f"(t.acc[1][0].c[1]), "+f"(t.acc[1][0].c[2]), "+f"(t.acc[1][0].c[3]), "+f"(t.acc[1][1].c[0]), "+f"(t.acc[1][1].c[1]), "+f"(t.acc[1][1].c[2]), "+f"(t.acc[1][1].c[3]), "+f"(t.acc[1][2].c[0]), "+f"(t.acc[1][2].c[1]), "+f"(t.acc[1][2].c[2]), "+f"(t.acc[1][2].c[3]), "+f"(t.acc[1][3].c[0]), "+f"(t.acc[1][3].c[1]), "+f"(t.acc[1][3].c[2]), "+f"(t.acc[1][3].c[3]), "+f"(t.acc[2][0].c[0]), "+f"(t.acc[2][0].c[1]), "+f"(t.acc[2][0].c[2]), "+f"(t.acc[2][0].c[3]), "+f"(t.acc[2][1].c[0]), "+f"(t.acc[2][1].c[1]), "+f"(t.acc[2][1].c[2]), "+f"(t.acc[2][1].c[3]), "+f"(t.acc[2][2].c[0]), "+f"(t.acc[2][2].c[1]), "+f"(t.acc[2][2].c[2]), "+f"(t.acc[2][2].c[3]), "+f"(t.acc[2][3].c[0]), "+f"(t.acc[2][3].c[1]), "+f"(t.acc[2][3].c[2]), "+f"(t.acc[2][3].c[3]), "+f"(t.acc[3][0].c[0]), "+f"(t.acc[3][0].c[1]), "+f"(t.acc[3][0].c[2]), "+f"(t.acc[3][0].c[3]), "+f"(t.acc[3][1].c[0]), "+f"(t.acc[3][1].c[1]), "+f"(t.acc[3][1].c[2]), "+f"(t.acc[3][1].c[3]), "+f"(t.acc[3][2].c[0]), "+f"(t.acc[3][2].c[1]), "+f"(t.acc[3][2].c[2]), "+f"(t.acc[3][2].c[3]), "+f"(t.acc[3][3].c[0]), "+f"(t.acc[3][3].c[1]), "+f"(t.acc[3][3].c[2]), "+f"(t.acc[3][3].c[3])                                                                                           \
               : "l"(desc_a), "l"(desc_b))
template <class T>
WEFT_FN void wgmma_m64n128k16(GemmTile& t, uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    WEFT_WGMMA_M64N128K16("bf16");
  } else {
    WEFT_WGMMA_M64N128K16("f16");
  }
}
#undef WEFT_WGMMA_M64N128K16

// One stage's MMAs: each warpgroup's two k steps, waited for before returning (the pipeline refills this stage
// next).
template <class T>
WEFT_FN void gemm_stage(GemmTile& tile, const T* ta, const T* tb) {
  ta += (threadIdx.x / 128) * 64 * GEMM_BK;
  wgmma_fence_operands(tile);
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
  for (int kk = 0; kk < GEMM_BK / 16; ++kk) {
    // A: 16 elements (32 bytes) further along each row; stride 512 bytes between groups of 8 rows.
    // B: 16 k-rows (1024 bytes) further; 2048 bytes between 32-column atoms, 512 between groups of 8 k-rows.
    wgmma_m64n128k16<T>(tile, wgmma_desc(ta + kk * 16, 16, 512), wgmma_desc(tb + kk * 16 * 32, 2048, 512));
  }
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  wgmma_fence_operands(tile);
}
#else
// One stage's MMAs with mma.sync: 8 warps in a 2 x 4 grid, each a 64 x 32 warp tile; A fragments from ldmatrix.x4,
// B fragments two at a time from ldmatrix.x4.trans.
template <class T>
WEFT_FN void gemm_stage(GemmTile& tile, const T* ta, const T* tb) {
  uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint32_t wm = (warp / 4) * 64, wn = (warp % 4) * 32;
#pragma unroll
  for (int kk = 0; kk < GEMM_BK / 16; ++kk) {
    MmaA<T> fa[4];
    MmaB<T> fb[4];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi) {
      uint32_t r = wm + mi * 16 + lane % 16, c = kk * 2 + lane / 16;
      ldmatrix_x4<false>(ta + r * 32 + ((c ^ ((r >> 1) & 3)) * 8), fa[mi].r[0], fa[mi].r[1], fa[mi].r[2],
                         fa[mi].r[3]);
    }
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) {
      // One x4.trans: the B fragments of two adjacent 8-column tiles.
      uint32_t r = kk * 16 + lane % 16, c = wn / 8 + nj * 2 + lane / 16;
      ldmatrix_x4<true>(tb + r * 128 + ((c ^ (r & 7)) * 8), fb[2 * nj].r[0], fb[2 * nj].r[1], fb[2 * nj + 1].r[0],
                        fb[2 * nj + 1].r[1]);
    }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) tile.acc[mi][ni] = mma(fa[mi], fb[ni], tile.acc[mi][ni]);
  }
}
#endif

// The pipeline: k-tiles stream through GEMM_STAGES stages, the next ones loading while this one multiplies.
template <class T>
WEFT_FN GemmTile gemm_block_mainloop(const T* a, size_t lda, const T* b, size_t ldb, size_t k) {
  __shared__ alignas(1024) T sa[GEMM_STAGES][128 * GEMM_BK];
  __shared__ alignas(1024) T sb[GEMM_STAGES][GEMM_BK * 128];
  GemmTile tile;
#if defined(WEFT_GEMM_USES_WGMMA)
  tile.warpgroups = true;
#endif
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) tile.acc[mi][ni] = MmaAcc::zero();
  size_t ktiles = k / GEMM_BK;
  GemmCopies<T> copies(a, lda, b, ldb);
#pragma unroll
  for (int s = 0; s < GEMM_STAGES - 1; ++s) {
    if (size_t(s) < ktiles) copies.load(sa[s], sb[s]);
    cp_async_commit();
  }
  // The stage multiplied now (k-tile kt's) and the one refilled now (k-tile kt + GEMM_STAGES - 1's), counted round.
  uint32_t read = 0, write = GEMM_STAGES - 1;
#pragma unroll 1
  for (size_t kt = 0; kt < ktiles; ++kt) {
    cp_async_wait<GEMM_STAGES - 2>();
#if defined(WEFT_GEMM_USES_WGMMA)
    // wgmma reads shared memory through the async proxy: this thread's copies are made visible to it before the
    // barrier publishes the stage.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
    __syncthreads();
    // The stage refilled now was read in the previous iteration, which every thread has finished (the barrier;
    // gemm_stage returns only once its MMAs are done).
    if (kt + GEMM_STAGES - 1 < ktiles) copies.load(sa[write], sb[write]);
    cp_async_commit();
    gemm_stage(tile, sa[read], sb[read]);
    read = read + 1 == GEMM_STAGES ? 0 : read + 1;
    write = write + 1 == GEMM_STAGES ? 0 : write + 1;
  }
  cp_async_wait<0>();
  // The next call (or anything else in shared memory) may overwrite the stages once every warp is done.
  __syncthreads();
  return tile;
}

template <class CA, class CB>
WEFT_FN GemmTile gemm_block_at(CA const& ca, size_t row0, size_t lda, CB const& cb, size_t col0, size_t ldb, size_t k,
                               unsigned line) {
  using T = std::remove_cv_t<std::remove_reference_t<decltype(ca[0])>>;
  using TB = std::remove_cv_t<std::remove_reference_t<decltype(cb[0])>>;
  static_assert(std::is_same<T, TB>::value, "gemm_block: both operands have one element type");
  static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                "gemm_block multiplies f16 or bf16 matrices");
  gemm_check(ca, row0, lda, cb, col0, ldb, k, line);
  return gemm_block_mainloop<T>(ca.as_ptr() + row0 * lda, lda, cb.as_ptr() + col0, ldb, k);
}
template <class CA, class CB>
WEFT_FN GemmTile gemm_block(CA const& ca, size_t row0, size_t lda, CB const& cb, size_t col0, size_t ldb, size_t k) {
  return gemm_block_at(ca, row0, lda, cb, col0, ldb, k, 0);
}
}  // namespace detail

// The persistent Hopper GEMM behind `a.gemm_tiles(&b)` (tma.rs): a (m x k) x b (k x n), row-major f16 or bf16, in
// 128 x 256 tiles accumulated in f32, each block walking the tiles blockIdx.x, blockIdx.x + gridDim.x, ... in the
// grouped order (eight 128-row bands at a time, column by column). A block is three warpgroups: the first is the
// producer (one thread issues TMA copies of each 64-wide k step into one of 4 stages of 48 KB of dynamic shared
// memory, fewer where the GPU has less: WEFT_GEMM_TILES_STAGES below; the other 127 threads have nothing to do), the
// other two are consumers (each multiplies a 64-row half of the tile with m64n256k16 and then runs the kernel's
// epilogue on its 128 values per thread). Stages pass between them through mbarriers (full: the producer's expected
// bytes and TMA's completions; empty: one arrival per consumer warp), the MMAs of one stage overlap the next, and
// the producer fills the next tile's stages while the consumers run this tile's epilogue. Every barrier wait is
// bounded: a wait that outlasts about 2 s traps with a report.
// Preconditions, checked when the loop is opened (a failed one traps with a report naming the rule): blocks of 384
// threads in x, at least GemmTiles<T>::SHARED_BYTES of dynamic shared memory, a.cols() == b.rows(), m a multiple of
// 128, n of 256, k a positive multiple of 64, and maps made for this loop (the host's gemm_a/gemm_b boxes).
// The tensor maps are the host's (host/src/launch/tma.rs): a TmaMatrix kernel parameter is __grid_constant__, so
// its map stays in parameter space, where TMA reads it.
struct alignas(64) TmaMap {
  unsigned long long opaque[16];
};
template <class T>
class GemmTiles;
template <class T>
struct alignas(64) TmaMatrix {
  TmaMap map;
  unsigned long long rows_, cols_;
  unsigned int box_rows, box_cols;
  // The matrix's device address and row stride in elements, for the mma.sync loop, which copies with cp.async (the
  // host checked the same extent as the map's against the buffer).
  unsigned long long address_, ld_;
  WEFT_FN size_t rows() const { return rows_; }
  WEFT_FN size_t cols() const { return cols_; }
  // The persistent GEMM loop over this (m x k) times b (k x n): see GemmTiles.
  WEFT_FN GemmTiles<T> gemm_tiles(TmaMatrix const& b) const;
};
static_assert(sizeof(TmaMatrix<__nv_bfloat16>) == 192 && offsetof(TmaMatrix<__nv_bfloat16>, rows_) == 128 &&
                  offsetof(TmaMatrix<__nv_bfloat16>, box_rows) == 144 &&
                  offsetof(TmaMatrix<__nv_bfloat16>, address_) == 152,
              "host/src/launch/tma.rs writes this layout");

// A matrix sharded by rows over the LSA team, described for TMA: rank r's shard_rows rows are the start of its part
// of a symmetric window, and maps[r] is the same tensor map as maps[rank] but for the address of r's part (the
// windows are symmetric: the same extent, the same row stride). `a.gemm_tiles(b)` then reads each tile's rows of
// `a` straight from their owner's window: the all-gather of a column-parallel linear layer, fused into the GEMM's
// loads. At most MAX_PEERS ranks (the maps are a __grid_constant__ parameter of 128 bytes each); the host's
// TmaShards (host/src/launch/tma.rs) writes this layout.
template <class T>
struct alignas(64) TmaShards {
  static constexpr uint32_t MAX_PEERS = 8;
  TmaMap maps[MAX_PEERS];
  unsigned long long shard_rows_, cols_;
  unsigned int box_rows, box_cols, peers, rank;
  // Each rank's shard's device address and the row stride in elements, for the mma.sync loop (as TmaMatrix's).
  unsigned long long ld_, addresses[MAX_PEERS];
  // Rows of the whole matrix (every rank's shard, in rank order).
  WEFT_FN size_t rows() const { return size_t(shard_rows_) * peers; }
  WEFT_FN size_t cols() const { return cols_; }
  WEFT_FN size_t shard_rows() const { return shard_rows_; }
  // The persistent GEMM loop over this (m x k) times b (k x n), starting with this rank's own rows: see GemmTiles.
  WEFT_FN GemmTiles<T> gemm_tiles(TmaMatrix<T> const& b) const;
};
static_assert(sizeof(TmaShards<__nv_bfloat16>) == 1152 && offsetof(TmaShards<__nv_bfloat16>, shard_rows_) == 1024 &&
                  offsetof(TmaShards<__nv_bfloat16>, box_rows) == 1040 && offsetof(TmaShards<__nv_bfloat16>, ld_) == 1056 &&
                  offsetof(TmaShards<__nv_bfloat16>, addresses) == 1064,
              "host/src/launch/tma.rs writes this layout");

// How many 48 KB stages `gemm_tiles` pipes through: the host passes the GPU's count (host/src/jit/compile.rs,
// gemm_tiles_stages: 4 where a block may have 227 KB of shared memory, 3 on an A100's 163 KB, 2 on 99 KB), the
// same count its launch configuration sizes the shared memory for; 4 when compiled without it.
#if !defined(WEFT_GEMM_TILES_STAGES)
#define WEFT_GEMM_TILES_STAGES 4
#endif
static_assert(WEFT_GEMM_TILES_STAGES >= 2 && WEFT_GEMM_TILES_STAGES <= 4, "gemm_tiles pipes through 2 to 4 stages");

// Which loop `gemm_tiles` compiles to: 2, TMA + wgmma (sm_90a, WEFT_GEMM_MAINLOOP=wgmma); 1, cp.async + mma.sync
// (any other build for sm_80 and newer, into the same stages: see GemmTiles); 0, none (the loop traps when opened).
#if defined(WEFT_GEMM_USES_WGMMA)
#define WEFT_GEMM_TILES_LOOP 2
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define WEFT_GEMM_TILES_LOOP 1
#else
#define WEFT_GEMM_TILES_LOOP 0
#endif

namespace detail {
// The rules GemmTiles checks, by code (the host's copy, host/src/trap.rs, is checked against these lines).
WEFT_FN const char* gemm_tiles_misuse_text(unsigned code) {
  switch (code) {
    case 0: return "launch it with blocks of exactly 384 threads in x (a producer and two consumer warpgroups)";
    case 1: return "launch it with the dynamic shared memory of its stages (gemm_tiles_config gives it)";
    case 2: return "a.cols() must equal b.rows() (the k both operands share)";
    case 3: return "m must be a multiple of 128, n of 256 and k a positive multiple of 64, each below 2^31";
    case 4: return "a's map must copy 128 x 64 boxes and b's 64 x 64 (make them with TmaOperand::gemm_a and gemm_b)";
    case 5: return "it needs a GPU of compute capability 8.0 or newer";
    default: return "a pipeline barrier waited for about 2 s: a stage was never filled or never released";
    case 7: return "a's shards must be a positive multiple of 128 rows each, at most 8, this rank's among them";
  }
}
WEFT_FN void gemm_tiles_misuse(unsigned code) {
  trap_report(3, 0, code, 0, 0);
  __trap();
}
WEFT_FN void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
WEFT_FN void mbar_arrive_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
WEFT_FN void mbar_arrive(uint32_t bar) { asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory"); }
// Whether this target has `try_wait` (sm_90 on), which lets a waiting warp sleep in hardware instead of taking issue
// slots and shared-memory probes from the warps that compute.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WEFT_MBAR_PROBE_OP "try_wait"
#else
#define WEFT_MBAR_PROBE_OP "test_wait"
#endif
// One look at the phase of `bar` with this parity (acquire): `try_wait`, which may wait a while in hardware, where
// the target has it, `test_wait`, which answers at once, on sm_80 and sm_89.
WEFT_FN bool mbar_probe(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile("{\n\t.reg .pred p;\n\tmbarrier." WEFT_MBAR_PROBE_OP ".parity.shared::cta.b64 p, [%1], %2;\n\t"
               "selp.u32 %0, 1, 0, p;\n\t}"
               : "=r"(done)
               : "r"(bar), "r"(parity)
               : "memory");
  return done != 0;
}
#undef WEFT_MBAR_PROBE_OP
// Waits for the phase of `bar` with this parity (acquire); traps with a report after about 2^32 clocks.
WEFT_FN void mbar_wait(uint32_t bar, uint32_t parity) {
  if (mbar_probe(bar, parity)) return;
  long long start = clock64();
  while (!mbar_probe(bar, parity)) {
    if (clock64() - start > (1ll << 32)) gemm_tiles_misuse(6);
  }
}
// The arrival of this thread's cp.async copies on `bar`, once they have landed (the mma.sync loop's producer).
WEFT_FN void cp_async_arrive(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
WEFT_FN void tma_load_2d(uint32_t dst, const TmaMap* map, uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}
#if defined(WEFT_GEMM_USES_WGMMA)
#define WEFT_M64N256K16(TYPE)                                                                                      \
  asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32." TYPE "." TYPE " {" WEFT_REGS_128 "}, %128, %129, " \
               "1, 1, 1, 0, 1;"                                                                                    \
               : WEFT_OPS_128                                                                                      \
               : "l"(desc_a), "l"(desc_b))
#define WEFT_REGS_128 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WEFT_OPS_128 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
// d (a warpgroup's 64 x 256 f32, this thread's 128 values) += A (64 x 16, K-major) x B (16 x 256, N-major).
template <class T>
WEFT_FN void mma_m64n256k16(float* d, uint64_t desc_a, uint64_t desc_b) {
  if constexpr (std::is_same<T, __nv_bfloat16>::value) {
    WEFT_M64N256K16("bf16");
  } else {
    WEFT_M64N256K16("f16");
  }
}
#undef WEFT_M64N256K16
#undef WEFT_REGS_128
#undef WEFT_OPS_128
#endif
}  // namespace detail

extern __shared__ __align__(1024) unsigned char weft_dynamic_shared[];

template <class T>
class GemmTiles {
 public:
  static constexpr uint32_t BM = 128, BN = 256, BK = 64, STAGES = WEFT_GEMM_TILES_STAGES, THREADS = 384,
                            PER_THREAD = 128;
  static constexpr uint32_t A_BYTES = BM * BK * 2, B_BOX_BYTES = BK * 64 * 2, STAGE_BYTES = A_BYTES + BK * BN * 2;
  // The stages, 1 KB to align them to 1024 bytes (the swizzle and the descriptors address absolute bits), and the
  // 2 x STAGES barriers: host/src/launch/tma.rs's stages_bytes(STAGES).
  static constexpr uint32_t SHARED_BYTES = STAGES * STAGE_BYTES + 1024 + 2 * STAGES * 8;
  // Fragments of m16n8 per row of a warp's share: wgmma's warp holds 16 rows x 256 columns (32 fragments in a row),
  // mma.sync's warp a 64 x 64 square (4 rows of 8 fragments).
  static constexpr uint32_t FRAGMENT_COLS = WEFT_GEMM_TILES_LOOP == 1 ? 8 : 32;

  // Opened by every thread of the block together (it synchronises the block once).
  WEFT_FN GemmTiles(TmaMatrix<T> const& a, TmaMatrix<T> const& b)
      : a_maps_(&a.map), a_addresses_(&a.address_), lda_(a.ld_), b_(&b), shard_rows_(a.rows()) {
    open(a.rows(), a.cols(), a.box_rows, a.box_cols, b);
  }
  // The rows of `a` in shards, shard r in LSA rank r's window through a.maps[r]: the walk starts at this rank's own
  // bands (rows rank * shard_rows ..), so that at any moment the ranks read different peers' shards.
  WEFT_FN GemmTiles(TmaShards<T> const& a, TmaMatrix<T> const& b)
      : a_maps_(&a.maps[0]), a_addresses_(&a.addresses[0]), lda_(a.ld_), b_(&b), shard_rows_(a.shard_rows()) {
#if WEFT_GEMM_TILES_LOOP != 0
    if (a.peers == 0 || a.peers > TmaShards<T>::MAX_PEERS || a.rank >= a.peers || a.shard_rows() == 0 ||
        a.shard_rows() % BM != 0) {
      detail::gemm_tiles_misuse(7);
    }
    first_band_ = size_t(a.rank) * (a.shard_rows() / BM);
#endif
    open(a.rows(), a.cols(), a.box_rows, a.box_cols, b);
  }

 private:
  WEFT_FN void open(size_t m, size_t k, uint32_t a_box_rows, uint32_t a_box_cols, TmaMatrix<T> const& b) {
    static_assert(std::is_same<T, __nv_bfloat16>::value || std::is_same<T, __half>::value,
                  "gemm_tiles multiplies f16 or bf16 matrices");
#if WEFT_GEMM_TILES_LOOP == 0
    // Before sm_80 there is neither mma.sync m16n8k16 nor cp.async: the kernel compiles and stops here.
    detail::gemm_tiles_misuse(5);
#else
    uint32_t dynamic_bytes;
    asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dynamic_bytes));
    const size_t n = b.cols();
    if (blockDim.x != THREADS || blockDim.y != 1 || blockDim.z != 1) detail::gemm_tiles_misuse(0);
    if (dynamic_bytes < SHARED_BYTES) detail::gemm_tiles_misuse(1);
    if (b.rows() != k) detail::gemm_tiles_misuse(2);
    // TMA takes coordinates as 32-bit signed integers.
    const size_t limit = size_t(1) << 31;
    if (m % BM != 0 || n % BN != 0 || k % BK != 0 || k == 0 || m >= limit || n >= limit || k >= limit) {
      detail::gemm_tiles_misuse(3);
    }
    if (a_box_rows != BM || a_box_cols != BK || b.box_rows != BK || b.box_cols != 64) detail::gemm_tiles_misuse(4);
    const uint32_t raw = detail::shared_u32(weft_dynamic_shared);
    stages_ = raw + ((1024 - (raw & 1023)) & 1023);
    full_ = stages_ + STAGES * STAGE_BYTES;
    empty_ = full_ + STAGES * 8;
    tiles_m_ = m / BM;
    tiles_n_ = n / BN;
    tiles_ = tiles_m_ * tiles_n_;
    ktiles_ = k / BK;
    t_ = blockIdx.x;
    warpgroup_ = threadIdx.x / 128;
    // This thread's first value: consumer (warpgroup - 1) holds rows 64 (warpgroup - 1)..; with wgmma its warp w
    // rows 16w.. and every column, with mma.sync a 64 x 64 square, columns 64w...
    const uint32_t lane = threadIdx.x % 32, warp_in_group = (threadIdx.x / 32) % 4;
#if WEFT_GEMM_TILES_LOOP == 2
    row_base_ = (warpgroup_ > 0 ? warpgroup_ - 1 : 0) * 64 + warp_in_group * 16 + lane / 4;
    col_base_ = (lane % 4) * 2;
#else
    row_base_ = (warpgroup_ > 0 ? warpgroup_ - 1 : 0) * 64 + lane / 4;
    col_base_ = warp_in_group * 64 + (lane % 4) * 2;
#endif
    if (threadIdx.x == 0) {
      for (uint32_t s = 0; s < STAGES; ++s) {
        // Full: TMA's one expected-bytes arrival, or one arrival per producer thread once its copies land.
        detail::mbar_init(full_ + 8 * s, WEFT_GEMM_TILES_LOOP == 2 ? 1 : 128);
        detail::mbar_init(empty_ + 8 * s, 2 * 4);
      }
#if WEFT_GEMM_TILES_LOOP == 2
      // Visible to the async proxy (TMA's completions) and to the other threads.
      asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
    }
    __syncthreads();
    // The producer issues the block's whole walk here, before the kernel's loop, and leaves the kernel: with no path
    // from its threads into the consumers' code, ptxas honours setmaxnreg (tests/codegen.rs checks it does).
#if WEFT_GEMM_TILES_LOOP == 2
    if (warpgroup_ == 0) {
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
      if (threadIdx.x == 0) produce();
      asm volatile("exit;" ::: "memory");
    } else {
      asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    }
#else
    // cp.async copies 16 bytes per thread and instruction: the whole producer warpgroup issues them. Where the
    // target has setmaxnreg (sm_90a: Hopper, whatever the mainloop), the consumers take the producers' registers
    // as in the wgmma loop; elsewhere every thread has the 168 registers 384 threads leave.
    if (warpgroup_ == 0) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
#endif
      produce_copies();
      asm volatile("exit;" ::: "memory");
    }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
#endif
#endif
#endif
  }

 public:
  // The next tile of this block, computed: true while tiles are left (then row0(), col0() and value(i) describe
  // it), false once the walk is over. Only consumer threads get here (the producer has left the kernel).
  WEFT_FN bool next_tile() {
#if WEFT_GEMM_TILES_LOOP != 0
    if (warpgroup_ == 0) return false;
    if (t_ >= tiles_) return false;
    origin(t_, row0_, col0_);
    consume();
    t_ += gridDim.x;
    return true;
#else
    return false;
#endif
  }

  WEFT_FN size_t row0() const { return row0_; }
  WEFT_FN size_t col0() const { return col0_; }
  WEFT_FN size_t len() const { return PER_THREAD; }
  WEFT_FN bool is_empty() const { return false; }
  // Fragment f = i / 4 of the warp: rows 16 (f / FRAGMENT_COLS).., columns 8 (f % FRAGMENT_COLS).. of the warp's
  // share; within it rows lane / 4 (+ 8 for values 2 and 3), columns 2 (lane % 4) (+ 1).
  WEFT_FN size_t row(size_t i) const {
    return row_base_ + uint32_t(i / 4 / FRAGMENT_COLS) * 16 + ((i % 4) >= 2 ? 8u : 0u);
  }
  WEFT_FN size_t col(size_t i) const {
    return col_base_ + uint32_t(i / 4 % FRAGMENT_COLS) * 8 + uint32_t(i & 1);
  }
  WEFT_FN float value(size_t i) const { return d_[i]; }
  // The walk itself: the product's tile count, and where tile t of the loop's order starts (block b computes tiles
  // b, b + gridDim.x, ...; the order depends on the shape and the grid only, so every rank's block b walks the same
  // tiles): what a second pass over the block's tiles needs, the sum of a reduce-scatter.
  WEFT_FN size_t tiles() const { return tiles_; }
  WEFT_FN size_t tile_row0(size_t t) const {
    size_t row0, col0;
    origin(t, row0, col0);
    return row0;
  }
  WEFT_FN size_t tile_col0(size_t t) const {
    size_t row0, col0;
    origin(t, row0, col0);
    return col0;
  }
  // Value i of the current tile becomes v: an epilogue that changes the values in place before `gemm_store`.
  WEFT_FN void set_value(size_t i, float v) { d_[i] = v; }

  // The current tile into rows row0.. and columns col0.. of the row-major matrix c (ld elements per row), rounded
  // to T: the two neighbouring columns of each fragment row in one 4-byte store where the addresses allow it (c's
  // element 0 4-byte aligned, ld and col0 even), one element at a time otherwise.
  // Unchecked: detail::gemm_store_at checks the whole tile against c first.
  template <class C>
  WEFT_FN void store_into(C& c, size_t row0, size_t col0, size_t ld) const {
    static_assert(std::is_same<std::remove_cv_t<std::remove_reference_t<decltype(c[0])>>, T>::value,
                  "gemm_store writes the tile's own element type");
    const size_t top = (row0 + row_base_) * ld + col0 + col_base_;
    // Every pair starts at an even index when ld and col0 are (col_base_ is): all of them are aligned when element 0
    // is too.
    T* const base = &c[0];
    if ((reinterpret_cast<uintptr_t>(base) & 3) == 0 && ld % 2 == 0 && col0 % 2 == 0) {
#pragma unroll
      for (uint32_t f = 0; f < PER_THREAD / 4; ++f) {
        const size_t at = top + (f / FRAGMENT_COLS) * 16 * ld + (f % FRAGMENT_COLS) * 8;
        store_pair(base + at, d_[4 * f], d_[4 * f + 1]);
        store_pair(base + at + 8 * ld, d_[4 * f + 2], d_[4 * f + 3]);
      }
    } else {
#pragma unroll
      for (uint32_t i = 0; i < PER_THREAD; ++i) base[(row0 + row(i)) * ld + col0 + col(i)] = from_f32<T>(d_[i]);
    }
  }

 private:
  // Two neighbouring values at a 4-byte-aligned p, in one store.
  WEFT_FN static void store_pair(T* p, float x, float y) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
    } else {
      *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
    }
  }

  // The shard holding the rows row0.. of a tile (one: shards are whole bands), and in `row` where they start in it.
  WEFT_FN size_t shard_of(size_t row0, size_t& row) const {
    const size_t owner = row0 / shard_rows_;
    row = row0 - owner * shard_rows_;
    return owner;
  }

  // Tile t of the grouped order: eight bands of 128 rows at a time, column by column, the bands counted from
  // first_band_ (0, or this rank's own shard's first band: a rotation of the rows, so still every tile once).
  WEFT_FN void origin(size_t t, size_t& row0, size_t& col0) const {
    const size_t group = 8, first = (t / (group * tiles_n_)) * group;
    const size_t rows = tiles_m_ - first < group ? tiles_m_ - first : group, within = t % (group * tiles_n_);
    size_t band = first + within % rows + first_band_;
    if (band >= tiles_m_) band -= tiles_m_;
    row0 = band * BM;
    col0 = (within / rows) * BN;
  }

#if WEFT_GEMM_TILES_LOOP == 2
  WEFT_FN void produce() {
    // What this kernel's threads wrote, and what an acquire before the loop (an LSA barrier: the peers' shards are
    // in place) made visible, ordered before TMA's reads, which are the async proxy's.
    asm volatile("fence.proxy.async.global;" ::: "memory");
    uint32_t it = 0;
    for (size_t t = blockIdx.x; t < tiles_; t += gridDim.x) {
      size_t row0, col0;
      origin(t, row0, col0);
      size_t a_row;
      const TmaMap* a_map = a_maps_ + shard_of(row0, a_row);
      for (size_t kt = 0; kt < ktiles_; ++kt, ++it) {
        const uint32_t s = it % STAGES, stage = stages_ + s * STAGE_BYTES;
        // A fresh barrier counts its phase -1 as complete: the first round through the stages does not wait.
        detail::mbar_wait(empty_ + 8 * s, ((it / STAGES) & 1) ^ 1);
        detail::mbar_arrive_expect(full_ + 8 * s, STAGE_BYTES);
        detail::tma_load_2d(stage, a_map, full_ + 8 * s, int32_t(kt * BK), int32_t(a_row));
#pragma unroll
        for (uint32_t j = 0; j < BN / 64; ++j) {
          detail::tma_load_2d(stage + A_BYTES + j * B_BOX_BYTES, &b_->map, full_ + 8 * s, int32_t(col0 + 64 * j),
                              int32_t(kt * BK));
        }
      }
    }
  }

  WEFT_FN void fence_operands() {
#pragma unroll
    for (int i = 0; i < int(PER_THREAD); ++i) asm volatile("" : "+f"(d_[i])::"memory");
  }

  WEFT_FN void release(uint32_t s) {
    if (threadIdx.x % 32 == 0) detail::mbar_arrive(empty_ + 8 * s);
  }

  WEFT_FN void consume() {
    const uint32_t consumer = warpgroup_ - 1;
#pragma unroll
    for (int i = 0; i < int(PER_THREAD); ++i) d_[i] = 0.0f;
    for (size_t kt = 0; kt < ktiles_; ++kt, ++it_) {
      const uint32_t s = it_ % STAGES, stage = stages_ + s * STAGE_BYTES;
      detail::mbar_wait(full_ + 8 * s, (it_ / STAGES) & 1);
      fence_operands();
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (uint32_t kk = 0; kk < BK / 16; ++kk) {
        // Both operands in the 128-byte swizzle TMA wrote (descriptor layout type 1).
        detail::mma_m64n256k16<T>(d_, detail::smem_matrix_desc(stage + consumer * 64 * 128 + kk * 32, 16, 1024, 1),
                                  detail::smem_matrix_desc(stage + A_BYTES + kk * 2048, B_BOX_BYTES, 1024, 1));
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      // The previous stage's MMAs are complete once at most this stage's are in flight: hand it back.
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      if (kt > 0) release((it_ - 1) % STAGES);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    fence_operands();
    release((it_ - 1) % STAGES);
  }
#elif WEFT_GEMM_TILES_LOOP == 1
  // The producer warpgroup's copies, into the stage layout TMA writes (so both loops read the same stages): A's 128
  // rows of 64 elements and B's four boxes of 64 k-rows x 64 columns, each row 128 bytes whose 16-byte chunk c sits
  // at c ^ (row % 8). Thread p copies chunk c = p % 8 of rows p / 8 + 16 i: A's rows (i < 8) and the k-rows of each
  // of B's boxes (i < 4, four boxes); its copies arrive on the stage's full barrier once they have landed (128
  // arrivals fill it).
  //
  // Every row a thread copies is p / 8 plus a multiple of 16, so its swizzled chunk is the same in every row: the
  // shared addresses are the thread's first one plus constants, and the global ones its first row's plus whole
  // multiples of 16 rows (and 64 columns from box to box). Computed once per tile, they leave a stage 24 copies and
  // a few additions: the producer is one warp per scheduler beside the MMA warps, and with the addresses worked out
  // copy by copy (462 instructions a stage, 24 of them copies) it could not keep up with them (2026-12-06, H200:
  // the consumers found the stage not yet full 99% of the time, 19% of all stall samples).
  WEFT_FN void produce_copies() {
    const uint32_t row = threadIdx.x / 8, chunk = threadIdx.x % 8;
    const uint32_t first = row * 128 + ((chunk ^ (row % 8)) * 16);
    const size_t ldb = b_->ld_;
    const uint64_t b_global = __cvta_generic_to_global(reinterpret_cast<const T*>(b_->address_));
    // Bytes from one of this thread's rows to the next (16 rows down), and from one k-tile to the next.
    const uint64_t a_rows = 16 * lda_ * sizeof(T), b_rows = 16 * ldb * sizeof(T), b_ktile = BK * ldb * sizeof(T);
    uint32_t it = 0;
    for (size_t t = blockIdx.x; t < tiles_; t += gridDim.x) {
      size_t row0, col0;
      origin(t, row0, col0);
      size_t a_row;
      const size_t owner = shard_of(row0, a_row);
      uint64_t a = __cvta_generic_to_global(reinterpret_cast<const T*>(a_addresses_[owner])) +
                   ((a_row + row) * lda_ + chunk * 8) * sizeof(T);
      uint64_t b = b_global + (row * ldb + col0 + chunk * 8) * sizeof(T);
      for (size_t kt = 0; kt < ktiles_; ++kt, ++it, a += BK * sizeof(T), b += b_ktile) {
        const uint32_t s = it % STAGES, stage = stages_ + s * STAGE_BYTES + first;
        detail::mbar_wait(empty_ + 8 * s, ((it / STAGES) & 1) ^ 1);
#pragma unroll
        for (uint32_t i = 0; i < BM / 16; ++i) detail::cp_async_16_global(stage + i * 2048, a + i * a_rows);
#pragma unroll
        for (uint32_t i = 0; i < BK / 16; ++i) {
#pragma unroll
          for (uint32_t box = 0; box < BN / 64; ++box) {
            detail::cp_async_16_global(stage + A_BYTES + box * B_BOX_BYTES + i * 2048,
                                       b + i * b_rows + box * 64 * sizeof(T));
          }
        }
        detail::cp_async_arrive(full_ + 8 * s);
      }
    }
    // Nothing may leave while its copies are in flight.
    asm volatile("cp.async.wait_all;" ::: "memory");
  }

  // A consumer warp's 64 x 64 square (rows 64 (warpgroup - 1).., columns 64 (warp % 4)..: B's box warp % 4) of each
  // stage: per k step of 16, A's four 16-row fragments by ldmatrix.x4, then B's fragments two columns of 8 at a
  // time (ldmatrix.x4.trans), 32 mma.sync. The stage is released once its last fragments are in registers.
  //
  // The addresses: ldmatrix lane l names row l % 16 of its four 8 x 8 matrices, at the 16-byte chunk 2 step + l / 16
  // (A: k step kk; B: column pair nj), which the swizzle puts at chunk (2 step + l / 16) ^ (row % 8). Every row here
  // is l % 16 plus a multiple of 16, so row % 8 = l % 8, and the chunk's byte offset is (l / 16 ^ l % 8) 16 XOR
  // step 32 (the two terms share no bit). Rows are 128 bytes and the stages 1024-byte aligned, so the lane's address
  // is its row's start plus (l / 16 ^ l % 8) 16, XOR step 32, plus 2048 per 16 rows (A) or k-rows (B) further.
  WEFT_FN void consume() {
    const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const uint32_t chunk = ((lane / 16) ^ (lane % 8)) * 16;
    const uint32_t a_lane = ((warpgroup_ - 1) * 64 + lane % 16) * 128 + chunk;
    const uint32_t b_lane = A_BYTES + warp * B_BOX_BYTES + (lane % 16) * 128 + chunk;
#pragma unroll
    for (int i = 0; i < int(PER_THREAD); ++i) d_[i] = 0.0f;
    for (size_t kt = 0; kt < ktiles_; ++kt, ++it_) {
      const uint32_t s = it_ % STAGES, stage = stages_ + s * STAGE_BYTES;
      detail::mbar_wait(full_ + 8 * s, (it_ / STAGES) & 1);
      const uint32_t a0 = stage + a_lane, b0 = stage + b_lane;
#pragma unroll
      for (uint32_t kk = 0; kk < BK / 16; ++kk) {
        uint32_t fa[4][4];
#pragma unroll
        for (uint32_t mi = 0; mi < 4; ++mi) detail::ldmatrix_x4_at((a0 ^ (kk * 32)) + mi * 2048, fa[mi], false);
#pragma unroll
        for (uint32_t nj = 0; nj < 4; ++nj) {
          uint32_t fb[4];
          detail::ldmatrix_x4_at((b0 ^ (nj * 32)) + kk * 2048, fb, true);
#pragma unroll
          for (uint32_t mi = 0; mi < 4; ++mi) {
            detail::mma_16816<T>(&d_[4 * (mi * 8 + 2 * nj)], fa[mi], &fb[0]);
            detail::mma_16816<T>(&d_[4 * (mi * 8 + 2 * nj + 1)], fa[mi], &fb[2]);
          }
        }
      }
      // Every lane's reads of the stage are done (its fragments fed the MMAs above).
      __syncwarp();
      if (lane == 0) detail::mbar_arrive(empty_ + 8 * s);
    }
  }
#endif

  // a's maps: one (a TmaMatrix), or one per shard (a TmaShards); shard s holds rows s * shard_rows_ ..; the same
  // for the addresses the mma.sync loop copies from, lda_ elements from row to row.
  const TmaMap* a_maps_;
  const unsigned long long* a_addresses_;
  size_t lda_;
  const TmaMatrix<T>* b_;
  size_t shard_rows_;
  uint32_t stages_ = 0, full_ = 0, empty_ = 0, it_ = 0, warpgroup_ = 0, row_base_ = 0, col_base_ = 0;
  size_t tiles_m_ = 0, tiles_n_ = 0, tiles_ = 0, ktiles_ = 0, t_ = 0, row0_ = 0, col0_ = 0, first_band_ = 0;
  float d_[PER_THREAD];
};

template <class T>
WEFT_FN GemmTiles<T> TmaMatrix<T>::gemm_tiles(TmaMatrix<T> const& b) const {
  return GemmTiles<T>(*this, b);
}
template <class T>
WEFT_FN GemmTiles<T> TmaShards<T>::gemm_tiles(TmaMatrix<T> const& b) const {
  return GemmTiles<T>(*this, b);
}

namespace detail {
// `c.gemm_store(&gemm, row0, col0, ld)`: the whole 128 x 256 tile checked against c, then stored (the macro emits
// this form: the access is never proven at launch).
template <class C, class T>
WEFT_FN void gemm_store_at(C&& c, GemmTiles<T> const& g, size_t row0, size_t col0, size_t ld, unsigned line) {
  check_tile(c.len(), ld, row0, col0, GemmTiles<T>::BM, GemmTiles<T>::BN, line);
  g.store_into(c, row0, col0, ld);
}
}  // namespace detail

}  // namespace weft
