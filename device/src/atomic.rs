//! Atomics with an explicit scope, and fences.
//!
//! An atomic takes the element it works on by reference: `atomic_add(&mut out[i], v, Scope::Device)`, where the
//! element may be one of a slice, a [`SharedArray`](crate::SharedArray) or a [`WindowView`](crate::WindowView)
//! (`&mut x.lsa(peer)[i]`, for an atomic on a peer's memory: use [`Scope::System`]). The macro lowers `&mut e` to
//! `e` (rule R13) and the C++ functions take `T&`; they take `T*` as well.
//!
//! Read-modify-write atomics are relaxed; order them with [`atomic_fence`] or use [`atomic_load`] /
//! [`atomic_store`] with an [`Order`].

use crate::device_only;
use crate::numeric::{AtomicAdd, AtomicBits, AtomicMinMax};
use crate::ordering::{Order, Scope};

/// Adds `value` to `*place` atomically within `scope`; returns the previous value.
/// C++ `weft::atomic_add` (`cuda::atomic_ref<T, scope>::fetch_add`; `atomicAdd` for `f16`/`bf16`).
pub fn atomic_add<T: AtomicAdd>(place: &mut T, value: T, scope: Scope) -> T {
    device_only("atomic_add")
}

/// Stores the larger of `*place` and `value` atomically; returns the previous value. C++ `weft::atomic_max`.
pub fn atomic_max<T: AtomicMinMax>(place: &mut T, value: T, scope: Scope) -> T {
    device_only("atomic_max")
}

/// Stores the smaller of `*place` and `value` atomically; returns the previous value. C++ `weft::atomic_min`.
pub fn atomic_min<T: AtomicMinMax>(place: &mut T, value: T, scope: Scope) -> T {
    device_only("atomic_min")
}

/// Stores `value` atomically; returns the previous value. C++ `weft::atomic_exch`.
pub fn atomic_exch<T: AtomicBits>(place: &mut T, value: T, scope: Scope) -> T {
    device_only("atomic_exch")
}

/// If `*place` equals `expected` (bitwise), stores `value`; returns the previous value either way (so the swap
/// happened exactly when the result equals `expected`). C++ `weft::atomic_cas`.
pub fn atomic_cas<T: AtomicBits>(place: &mut T, expected: T, value: T, scope: Scope) -> T {
    device_only("atomic_cas")
}

/// Loads `*place` atomically with `order` (`Relaxed`, `Acquire` or `SeqCst`). C++ `weft::atomic_load`.
pub fn atomic_load<T: AtomicBits>(place: &T, order: Order, scope: Scope) -> T {
    device_only("atomic_load")
}

/// Stores `value` atomically with `order` (`Relaxed`, `Release` or `SeqCst`). C++ `weft::atomic_store`.
pub fn atomic_store<T: AtomicBits>(place: &mut T, value: T, order: Order, scope: Scope) {
    device_only("atomic_store")
}

/// A fence of `order` over `scope` (`cuda::atomic_thread_fence`). C++ `weft::atomic_fence`.
pub fn atomic_fence(order: Order, scope: Scope) {
    device_only("atomic_fence")
}

/// Orders this thread's memory accesses as seen by the whole GPU (`__threadfence()`).
pub fn threadfence() {
    device_only("threadfence")
}

/// Orders this thread's memory accesses as seen by its block (`__threadfence_block()`).
pub fn threadfence_block() {
    device_only("threadfence_block")
}

/// Orders this thread's memory accesses as seen by the whole system, peers and host included
/// (`__threadfence_system()`).
pub fn threadfence_system() {
    device_only("threadfence_system")
}
