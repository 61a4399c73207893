//! weft's kernel vocabulary.
//!
//! A `#[weft::kernel]` body is ordinary Rust that rustc type-checks against the items of this crate, and that the
//! macro then translates, almost name for name, into CUDA C++ calling `device/cuda/weft.cuh` (exposed here as
//! [`WEFT_CUH`]), which in turn calls NCCL's device API. So every item here exists twice:
//!
//! - as Rust, with the signature and the documentation a kernel author reads. Its host body never runs: it calls
//!   [`device_only`], which panics, because these items only mean something on a GPU inside a kernel.
//! - as C++ in namespace `weft` under the same name (`docs/vocabulary.md` lists both sides, the NCCL call each one
//!   uses, and the few rules where the translation is not a plain name copy).
//!
//! What the types buy you: a kernel that uses GIN does not compile against a [`DevComm`]`<`[`caps::Lsa`]`>`; a
//! barrier session cannot be used after [`LsaBarrier::end`]; a barrier opened for a [`Cta`] cannot be synced by a
//! [`Warp`].
//!
//! ```
//! use weft_device::prelude::*;
//!
//! // What #[weft::kernel] keeps for rustc: this type-checks, and would panic if called on the host.
//! fn allreduce_add<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
//!     let bar = dev.lsa_barrier(Cta, block_idx_x());
//!     bar.sync(Cta, Order::Relaxed);
//!     for i in grid_stride(n) {
//!         let mut acc = T::zero();
//!         for peer in 0..dev.lsa_size() {
//!             acc += x.lsa(peer)[i];
//!         }
//!         out[i] = acc;
//!     }
//!     bar.sync(Cta, Order::Release);
//! }
//! ```
//!
//! Misuse does not compile. A session used after it ended:
//!
//! ```compile_fail,E0382
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<Lsa>) {
//!     let bar = dev.lsa_barrier(Cta, block_idx_x());
//!     bar.end();
//!     bar.sync(Cta, Order::Relaxed); // error[E0382]: use of moved value: `bar`
//! }
//! ```
//!
//! GIN through a communicator without it:
//!
//! ```compile_fail,E0599
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<Lsa>) {
//!     let gin = dev.gin(0); // error[E0599]: method `gin` exists but its trait bounds were not satisfied
//! }
//! ```
//!
//! A session synced by another coop than the one that opened it:
//!
//! ```compile_fail,E0308
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<Lsa>) {
//!     let bar = dev.lsa_barrier(Cta, block_idx_x());
//!     bar.sync(Warp, Order::Relaxed); // error[E0308]: mismatched types
//! }
//! ```
//!
//! A session copied:
//!
//! ```compile_fail,E0382
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<LsaGin>) {
//!     let gin = dev.gin(0);
//!     let bar = gin.rail_barrier(Cta, 0);
//!     let copy = bar;
//!     bar.sync(Cta, Order::Relaxed); // error[E0382]: use of moved value: `bar`
//! }
//! ```
//!
//! Multimem through a communicator without it, and a 16-bit multimem store:
//!
//! ```compile_fail,E0599
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<LsaGin>, x: &Window<f32>) {
//!     let view = dev.lsa_multimem(x); // error[E0599]
//! }
//! ```
//!
//! ```compile_fail,E0599
//! # use weft_device::prelude::*;
//! fn k(dev: &DevComm<LsaMultimem>, x: &Window<bf16>) {
//!     dev.lsa_multimem(x).store(0, bf16::ZERO); // error[E0599]: the trait bound `bf16: MultimemStore` is not satisfied
//! }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Every function body in this crate is `device_only(..)`: the parameters exist for rustc's type checking and for
// the reader, and are never used on the host.
#![allow(unused_variables)]

pub mod atomic;
pub mod barrier;
pub mod caps;
pub mod comm;
pub mod coop;
pub mod exec;
pub mod gemm;
pub mod gin;
pub mod ll_a2a;
pub mod mma;
pub mod multimem;
pub mod numeric;
pub mod ordering;
pub mod pack;
pub mod reduce_copy;
pub mod shared;
pub mod window;

pub use half::{bf16, f16};

pub use atomic::{
    atomic_add, atomic_cas, atomic_exch, atomic_fence, atomic_load, atomic_max, atomic_min, atomic_store, threadfence,
    threadfence_block, threadfence_system,
};
pub use barrier::{BarrierResult, GinBarrier, HybridBarrier, LsaBarrier};
pub use caps::{Capabilities, CapabilitySet, HasGin, HasLsa, HasMultimem};
pub use comm::{DevComm, Team};
pub use coop::{Coop, Cta, Lanes, Thread, Warp, WarpSpan};
pub use exec::*;
pub use gemm::{GemmOperand, GemmStore, GemmTile, GemmTiles, TmaMatrix, TmaShards};
pub use gin::{
    CounterInc, GinSession, LocalAction, NoAction, RemoteAction, SignalAdd, SignalInc, StrongSignalAdd,
    StrongSignalInc, StrongVaSignalAdd, StrongVaSignalInc, VaSignalAdd, VaSignalInc, WeakCounterInc, WeakSignalAdd,
    WeakSignalInc, WeakVaSignalAdd, WeakVaSignalInc,
};
pub use ll_a2a::{LlA2a, LlA2aHandle};
pub use mma::{mma, MmaA, MmaAcc, MmaB, MmaElement, MmaLoad, MmaStore};
pub use multimem::MultimemView;
pub use numeric::{
    abs, exp, fma, log, max, min, rsqrt, sqrt, tanh, AtomicAdd, AtomicBits, AtomicMinMax, Element, Float,
    MultimemElement, MultimemStore, Numeric, Shuffle,
};
pub use ordering::{Order, Scope};
pub use pack::{pack_lanes, Lamport, LoadPack, LoadWide, Pack, StorePack, StoreWide, WidePack};
pub use reduce_copy::{local_copy, local_reduce_sum, local_reduce_sum_copy};
pub use shared::SharedArray;
pub use window::{Window, WindowView};

/// The text of `weft.cuh`, the C++ implementation of this vocabulary, for the JIT to write next to generated
/// sources (under [`WEFT_CUH_NAME`]) or to hand to nvcc as an include.
pub const WEFT_CUH: &str = include_str!("../cuda/weft.cuh");

/// The file name generated sources `#include` ([`WEFT_CUH`]'s name).
pub const WEFT_CUH_NAME: &str = "weft.cuh";

/// The host body of every vocabulary item: panics, naming the item.
///
/// Kernel bodies are type-checked by rustc against this crate but run as CUDA C++ on the GPU; reaching this
/// function means a kernel function was called as a plain Rust function on the host (launch it through the
/// module `#[weft::kernel]` generates instead). `#[weft::device_fn]` may use it for the same purpose.
///
/// ```should_panic
/// weft_device::device_only("block_idx_x"); // weft: `block_idx_x` runs only inside a #[weft::kernel] on the GPU
/// ```
#[track_caller]
#[cold]
pub fn device_only(item: &str) -> ! {
    panic!("weft: `{item}` runs only inside a #[weft::kernel] on the GPU")
}

/// Everything a kernel body usually needs: `use weft_device::prelude::*;` (re-exported as `weft::prelude`).
pub mod prelude {
    pub use crate::caps::{
        Capabilities, CapabilitySet, Gin, HasGin, HasLsa, HasMultimem, Lsa, LsaGin, LsaGinMultimem, LsaMultimem,
        Multimem,
    };
    pub use crate::exec::*;
    pub use crate::{
        abs, atomic_add, atomic_cas, atomic_exch, atomic_fence, atomic_load, atomic_max, atomic_min, atomic_store, exp,
        fma, local_copy, local_reduce_sum, local_reduce_sum_copy, log, max, min, mma, pack_lanes, rsqrt, sqrt, tanh,
        threadfence, threadfence_block, threadfence_system, AtomicAdd, AtomicBits, AtomicMinMax, BarrierResult, Coop,
        CounterInc, Cta, DevComm, Element, Float, GemmOperand, GemmStore, GemmTile, GemmTiles, GinBarrier, GinSession,
        HybridBarrier, Lamport, Lanes, LlA2a, LlA2aHandle, LoadPack, LoadWide, LocalAction, LsaBarrier, MmaA, MmaAcc,
        MmaB, MmaElement, MmaLoad, MmaStore, MultimemElement, MultimemStore, MultimemView, NoAction, Numeric, Order,
        Pack, RemoteAction, Scope, SharedArray, Shuffle, SignalAdd, SignalInc, StorePack, StoreWide, StrongSignalAdd,
        StrongSignalInc, StrongVaSignalAdd, StrongVaSignalInc, Team, Thread, TmaMatrix, TmaShards, VaSignalAdd,
        VaSignalInc, Warp, WarpSpan, WeakCounterInc, WeakSignalAdd, WeakSignalInc, WeakVaSignalAdd, WeakVaSignalInc,
        WidePack, Window, WindowView,
    };
    pub use half::{bf16, f16};
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "weft: `block_idx_x` runs only inside a #[weft::kernel] on the GPU")]
    fn device_items_panic_on_the_host_naming_themselves() {
        let _ = block_idx_x();
    }

    #[test]
    fn header_text_is_embedded() {
        assert!(WEFT_CUH.contains("namespace weft"));
        assert_eq!(WEFT_CUH_NAME, "weft.cuh");
    }
}
