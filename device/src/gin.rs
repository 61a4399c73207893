//! GIN: GPU-initiated networking — one-sided puts, signals and counters (`ncclGin`).
//!
//! Open a context with [`DevComm::gin`] (needs `C: HasGin`). A put copies from this rank's copy of a window to a
//! peer's copy of a window; its *remote action* bumps a signal on the peer when the data has landed, its *local
//! action* bumps a counter here when the source may be reused. Signals and counters are numbered from 0 up to the
//! counts the communicator was created with (the macro derives them from the ids the body uses).
//!
//! Actions are tuple structs (`SignalInc(0)`) and the unit struct [`NoAction`]; in C++ they are `weft::SignalInc(0)`
//! and `weft::NoAction{}` (rules R6, R7). Items marked *2.32* compile to a `static_assert` naming NCCL 2.32 when the
//! kernel is built against older headers.

use core::marker::PhantomData;

use crate::barrier::BarrierResult;
use crate::caps::HasGin;
use crate::comm::{DevComm, Team};
use crate::coop::Coop;
use crate::device_only;
use crate::numeric::Element;
use crate::ordering::Order;
use crate::window::Window;

/// A GIN context of a device communicator (`ncclGin`). C++ `weft::GinSession`.
#[derive(Debug, Clone, Copy)]
pub struct GinSession<'comm> {
    _comm: PhantomData<&'comm ()>,
}

impl<C: HasGin> DevComm<C> {
    /// Opens GIN context `context` (taken modulo the communicator's context count; `ncclGin(comm, context)`).
    /// Different blocks may use different contexts to spread traffic over queues. C++ `dev.gin(context)`.
    pub fn gin(&self, context: u32) -> GinSession<'_> {
        device_only("DevComm::gin")
    }
}

mod sealed {
    pub trait Sealed {}
}

/// What a put or signal does on the peer once it lands (sealed: the action types of this module).
pub trait RemoteAction: sealed::Sealed + Copy + core::fmt::Debug {}
/// What a put does locally once its source has been read (sealed: [`NoAction`], [`CounterInc`],
/// [`WeakCounterInc`]).
pub trait LocalAction: sealed::Sealed + Copy + core::fmt::Debug {}

/// No completion action (`ncclGin_None`). C++ `weft::NoAction{}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoAction;

/// Adds 1 to signal `.0` on the peer (`ncclGin_SignalInc`). Between two resets of a signal, use only `SignalInc`
/// or only other operations on it. C++ `weft::SignalInc(s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalInc(pub u32);

/// Adds `.1` to signal `.0` on the peer (`ncclGin_SignalAdd`). C++ `weft::SignalAdd(s, v)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalAdd(pub u32, pub u64);

/// *2.32.* [`SignalInc`] whose visibility implies every earlier put of this context to the peer has landed
/// (`ncclGin_StrongSignalInc`). C++ `weft::StrongSignalInc(s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrongSignalInc(pub u32);

/// *2.32.* [`SignalInc`] that only vouches for its own put (`ncclGin_WeakSignalInc`). C++ `weft::WeakSignalInc(s)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeakSignalInc(pub u32);

/// *2.32.* Strong [`SignalAdd`] (`ncclGin_StrongSignalAdd`). C++ `weft::StrongSignalAdd(s, v)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StrongSignalAdd(pub u32, pub u64);

/// *2.32.* Weak [`SignalAdd`] (`ncclGin_WeakSignalAdd`). C++ `weft::WeakSignalAdd(s, v)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeakSignalAdd(pub u32, pub u64);

/// *2.32.* Adds 1 to the `u64` at the start of window `.0` on the peer: a signal living in user memory
/// (`ncclGin_VASignalInc`). C++ `weft::VaSignalInc(w)`.
#[derive(Debug, Clone, Copy)]
pub struct VaSignalInc<'w>(pub &'w Window<u64>);

/// *2.32.* Adds `.1` to the `u64` at the start of window `.0` on the peer (`ncclGin_VASignalAdd`).
/// C++ `weft::VaSignalAdd(w, v)`.
#[derive(Debug, Clone, Copy)]
pub struct VaSignalAdd<'w>(pub &'w Window<u64>, pub u64);

/// *2.32.* Strong [`VaSignalInc`] (`ncclGin_StrongVASignalInc`). C++ `weft::StrongVaSignalInc(w)`.
#[derive(Debug, Clone, Copy)]
pub struct StrongVaSignalInc<'w>(pub &'w Window<u64>);

/// *2.32.* Weak [`VaSignalInc`] (`ncclGin_WeakVASignalInc`). C++ `weft::WeakVaSignalInc(w)`.
#[derive(Debug, Clone, Copy)]
pub struct WeakVaSignalInc<'w>(pub &'w Window<u64>);

/// *2.32.* Strong [`VaSignalAdd`] (`ncclGin_StrongVASignalAdd`). C++ `weft::StrongVaSignalAdd(w, v)`.
#[derive(Debug, Clone, Copy)]
pub struct StrongVaSignalAdd<'w>(pub &'w Window<u64>, pub u64);

/// *2.32.* Weak [`VaSignalAdd`] (`ncclGin_WeakVASignalAdd`). C++ `weft::WeakVaSignalAdd(w, v)`.
#[derive(Debug, Clone, Copy)]
pub struct WeakVaSignalAdd<'w>(pub &'w Window<u64>, pub u64);

/// Adds 1 to local counter `.0` once the put's source has been read (`ncclGin_CounterInc`).
/// C++ `weft::CounterInc(c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterInc(pub u32);

/// *2.32.* [`CounterInc`] that only vouches for its own put (`ncclGin_WeakCounterInc`).
/// C++ `weft::WeakCounterInc(c)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WeakCounterInc(pub u32);

macro_rules! action {
    ($tr:ident: $($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl $tr for $t {}
    )*};
}
action!(RemoteAction: SignalInc, SignalAdd, StrongSignalInc, WeakSignalInc, StrongSignalAdd, WeakSignalAdd);
action!(
    RemoteAction: VaSignalInc<'_>,
    VaSignalAdd<'_>,
    StrongVaSignalInc<'_>,
    WeakVaSignalInc<'_>,
    StrongVaSignalAdd<'_>,
    WeakVaSignalAdd<'_>
);
action!(LocalAction: CounterInc, WeakCounterInc);
impl sealed::Sealed for NoAction {}
impl RemoteAction for NoAction {}
impl LocalAction for NoAction {}

impl GinSession<'_> {
    /// Copies `count` elements from this rank's copy of `src` to rank `peer` of `team`'s copy of `dst`, then runs
    /// `remote` on the peer and `local` here (`ncclGin::put`). One thread of `coop` issues it.
    /// C++ `gin.put(team, peer, dst, src, count, remote, local, coop)`.
    #[allow(clippy::too_many_arguments)]
    pub fn put<T: Element, R: RemoteAction, L: LocalAction, Co: Coop>(
        &self,
        team: Team,
        peer: u32,
        dst: &Window<T>,
        src: &Window<T>,
        count: usize,
        remote: R,
        local: L,
        coop: Co,
    ) {
        device_only("GinSession::put")
    }

    /// Writes `value` (at most 8 bytes) to the first element of rank `peer` of `team`'s copy of `dst`, then runs
    /// `remote` (`ncclGin::putValue`). C++ `gin.put_value(team, peer, dst, value, remote, coop)`.
    pub fn put_value<T: Element, R: RemoteAction, Co: Coop>(
        &self,
        team: Team,
        peer: u32,
        dst: &Window<T>,
        value: T,
        remote: R,
        coop: Co,
    ) {
        device_only("GinSession::put_value")
    }

    /// Runs `remote` on rank `peer` of `team` with no data, ordered after this context's earlier puts to it
    /// (`ncclGin::signal`). C++ `gin.signal(team, peer, remote, coop)`.
    pub fn signal<R: RemoteAction, Co: Coop>(&self, team: Team, peer: u32, remote: R, coop: Co) {
        device_only("GinSession::signal")
    }

    /// *2.32.* Copies `count` elements from rank `peer` of `team`'s copy of `remote` into this rank's copy of
    /// `local` (`ncclGin::get`); complete after [`flush`](Self::flush). C++ `gin.get(team, peer, remote, local,
    /// count, coop)`.
    pub fn get<T: Element, Co: Coop>(
        &self,
        team: Team,
        peer: u32,
        remote: &Window<T>,
        local: &Window<T>,
        count: usize,
        coop: Co,
    ) {
        device_only("GinSession::get")
    }

    /// Waits until the sources of every put this coop issued may be reused (not that they landed remotely;
    /// `ncclGin::flush`). C++ `gin.flush(coop, order)`.
    pub fn flush<Co: Coop>(&self, coop: Co, order: Order) {
        device_only("GinSession::flush")
    }

    /// The value of local signal `signal` (`ncclGin::readSignal`, acquire). C++ `gin.read_signal(signal)`.
    pub fn read_signal(&self, signal: u32) -> u64 {
        device_only("GinSession::read_signal")
    }

    /// Waits until signal `signal` reaches `least` (rolling comparison; `ncclGin::waitSignal`, acquire).
    /// C++ `gin.wait_signal(coop, signal, least)`.
    pub fn wait_signal<Co: Coop>(&self, coop: Co, signal: u32, least: u64) {
        device_only("GinSession::wait_signal")
    }

    /// [`wait_signal`](Self::wait_signal), giving up after `timeout_ns` nanoseconds; every thread of `coop` gets
    /// the same result. C++ `gin.wait_signal_timeout(coop, signal, least, timeout_ns)`.
    pub fn wait_signal_timeout<Co: Coop>(&self, coop: Co, signal: u32, least: u64, timeout_ns: u64) -> BarrierResult {
        device_only("GinSession::wait_signal_timeout")
    }

    /// Sets signal `signal` and its shadow to 0; nothing may modify it concurrently (`ncclGin::resetSignal`).
    /// C++ `gin.reset_signal(signal)`.
    pub fn reset_signal(&self, signal: u32) {
        device_only("GinSession::reset_signal")
    }

    /// The shadow of signal `signal`: a local value the kernel may use to track what it has consumed
    /// (`*ncclGin::getSignalShadowPtr`). C++ `gin.signal_shadow(signal)`.
    pub fn signal_shadow(&self, signal: u32) -> u64 {
        device_only("GinSession::signal_shadow")
    }

    /// Adds `delta` to the shadow of signal `signal` (`ncclGin::increaseSignalShadow`).
    /// C++ `gin.increase_signal_shadow(signal, delta)`.
    pub fn increase_signal_shadow(&self, signal: u32, delta: u64) {
        device_only("GinSession::increase_signal_shadow")
    }

    /// Waits until signal `signal` reaches its shadow (`ncclGin::waitSignalMeetShadow`).
    /// C++ `gin.wait_signal_meet_shadow(coop, signal)`.
    pub fn wait_signal_meet_shadow<Co: Coop>(&self, coop: Co, signal: u32) {
        device_only("GinSession::wait_signal_meet_shadow")
    }

    /// *2.32.* The value of the VA signal at the start of `signal`'s local copy (`ncclGin::readSignal(win, off)`).
    /// C++ `gin.read_va_signal(signal)`.
    pub fn read_va_signal(&self, signal: &Window<u64>) -> u64 {
        device_only("GinSession::read_va_signal")
    }

    /// *2.32.* Waits until the VA signal reaches `least`. C++ `gin.wait_va_signal(coop, signal, least)`.
    pub fn wait_va_signal<Co: Coop>(&self, coop: Co, signal: &Window<u64>, least: u64) {
        device_only("GinSession::wait_va_signal")
    }

    /// *2.32.* Sets the VA signal to 0. C++ `gin.reset_va_signal(signal)`.
    pub fn reset_va_signal(&self, signal: &Window<u64>) {
        device_only("GinSession::reset_va_signal")
    }

    /// The value of local counter `counter` (56 bits; `ncclGin::readCounter`). C++ `gin.read_counter(counter)`.
    pub fn read_counter(&self, counter: u32) -> u64 {
        device_only("GinSession::read_counter")
    }

    /// Waits until counter `counter` reaches `least` (`ncclGin::waitCounter`).
    /// C++ `gin.wait_counter(coop, counter, least)`.
    pub fn wait_counter<Co: Coop>(&self, coop: Co, counter: u32, least: u64) {
        device_only("GinSession::wait_counter")
    }

    /// [`wait_counter`](Self::wait_counter), giving up after `timeout_ns` nanoseconds.
    /// C++ `gin.wait_counter_timeout(coop, counter, least, timeout_ns)`.
    pub fn wait_counter_timeout<Co: Coop>(&self, coop: Co, counter: u32, least: u64, timeout_ns: u64) -> BarrierResult {
        device_only("GinSession::wait_counter_timeout")
    }

    /// Sets counter `counter` to 0; nothing may modify it concurrently (`ncclGin::resetCounter`).
    /// C++ `gin.reset_counter(counter)`.
    pub fn reset_counter(&self, counter: u32) {
        device_only("GinSession::reset_counter")
    }
}
