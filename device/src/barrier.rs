//! Barrier sessions: LSA (memory), GIN (network) and hybrid (LSA then rail GIN).
//!
//! A session is opened by a coop for one barrier index, synchronised any number of times, and ended; NCCL keeps
//! the barrier's epoch in the session and writes it back when it ends. The Rust types make the lifecycle a compile
//! error to get wrong: a session is neither `Copy` nor `Clone`, [`end`](LsaBarrier::end) consumes it (using it
//! afterwards is "use of moved value"), every call must pass the coop type it was opened with, and it borrows the
//! communicator it came from. Dropping a session without `end` ends it at the end of its scope, as in C++.

use core::marker::PhantomData;

use crate::caps::{HasGin, HasLsa, HasMultimem};
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::device_only;
use crate::gin::GinSession;
use crate::ordering::Order;

/// The outcome of a bounded wait (`*_timeout`). Every thread of the coop gets the same value.
///
/// C++ `weft::BarrierResult`: `==`, `switch`/`case weft::BarrierResult::TimedOut:` and the `is_*` methods all
/// work there too.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "a timed-out barrier has not synchronised anything"]
pub enum BarrierResult {
    /// Every peer arrived in time; the wait completed.
    Ok,
    /// The timeout passed first. For an LSA barrier, the session's own arrival stands and its epoch is unchanged:
    /// wait again with the same session, or give up — end it, leave the kernel and treat the communicator as failed
    /// (the barrier's state no longer matches the peers'). For a GIN barrier, the signals were sent: give up.
    TimedOut,
    /// The communicator was aborted while waiting (NCCL 2.32+ headers; never returned with older ones).
    Aborted,
}

impl BarrierResult {
    /// Whether the wait completed.
    pub const fn is_ok(self) -> bool {
        matches!(self, BarrierResult::Ok)
    }

    /// Whether the timeout passed first.
    pub const fn is_timed_out(self) -> bool {
        matches!(self, BarrierResult::TimedOut)
    }

    /// Whether the communicator was aborted.
    pub const fn is_aborted(self) -> bool {
        matches!(self, BarrierResult::Aborted)
    }
}

/// An LSA barrier session: synchronises the ranks of the LSA team through flags in each other's memory
/// (`ncclLsaBarrierSession`). Open it with [`DevComm::lsa_barrier`].
#[derive(Debug)]
#[must_use = "a barrier session does nothing until synchronised"]
pub struct LsaBarrier<'comm, Co: Coop> {
    _comm: PhantomData<&'comm ()>,
    _coop: PhantomData<Co>,
}

impl<C: HasLsa> DevComm<C> {
    /// Opens LSA barrier `index` for `coop` (`ncclLsaBarrierSession(coop, comm, ncclTeamTagLsa{}, index)`).
    ///
    /// `index` must be below the communicator's LSA barrier count; the macro derives that requirement from the
    /// expression (`block_idx_x()` → the launch's grid size). No two coops may use the same index at the same
    /// time. C++ `dev.lsa_barrier(coop, index)`.
    pub fn lsa_barrier<Co: Coop>(&self, coop: Co, index: u32) -> LsaBarrier<'_, Co> {
        device_only("DevComm::lsa_barrier")
    }
}

impl<C: HasLsa + HasMultimem> DevComm<C> {
    /// Opens LSA barrier `index` for `coop`, arriving through NVLink SHARP multicast (one multimem reduction
    /// instead of a store per peer). Same rules as [`lsa_barrier`](Self::lsa_barrier).
    /// C++ `dev.lsa_multimem_barrier(coop, index)`.
    pub fn lsa_multimem_barrier<Co: Coop>(&self, coop: Co, index: u32) -> LsaBarrier<'_, Co> {
        device_only("DevComm::lsa_multimem_barrier")
    }
}

impl<Co: Coop> LsaBarrier<'_, Co> {
    /// Signals this rank's arrival to every LSA peer; `order`'s release part orders this rank's earlier writes
    /// before it. C++ `bar.arrive(coop, order)`.
    pub fn arrive(&self, coop: Co, order: Order) {
        device_only("LsaBarrier::arrive")
    }

    /// Waits until every LSA peer has arrived (since this session's previous wait); `order`'s acquire part makes
    /// their earlier writes visible. C++ `bar.wait(coop, order)`.
    pub fn wait(&self, coop: Co, order: Order) {
        device_only("LsaBarrier::wait")
    }

    /// [`arrive`](Self::arrive) then [`wait`](Self::wait). C++ `bar.sync(coop, order)`.
    pub fn sync(&self, coop: Co, order: Order) {
        device_only("LsaBarrier::sync")
    }

    /// [`wait`](Self::wait), giving up after `timeout_ns` nanoseconds of the GPU's global timer.
    ///
    /// weft's own loop (NCCL 2.28 has no bounded wait; 2.32's counts clock cycles and may disagree between
    /// threads): it polls the inbox words NCCL's `wait` polls, and combines the outcome over the coop so every
    /// thread returns the same [`BarrierResult`]. C++ `bar.wait_timeout(coop, order, timeout_ns)`.
    pub fn wait_timeout(&self, coop: Co, order: Order, timeout_ns: u64) -> BarrierResult {
        device_only("LsaBarrier::wait_timeout")
    }

    /// [`arrive`](Self::arrive) then [`wait_timeout`](Self::wait_timeout). After
    /// [`BarrierResult::TimedOut`], call `wait_timeout` (not `sync_timeout`) to keep waiting.
    /// C++ `bar.sync_timeout(coop, order, timeout_ns)`.
    pub fn sync_timeout(&self, coop: Co, order: Order, timeout_ns: u64) -> BarrierResult {
        device_only("LsaBarrier::sync_timeout")
    }

    /// Ends the session: the coop writes the barrier's epoch back for the next session and synchronises. The
    /// session cannot be used afterwards. C++ `bar.end()`.
    pub fn end(self) {
        device_only("LsaBarrier::end")
    }
}

/// A GIN barrier session: synchronises a team of ranks over the network with GIN signals
/// (`ncclGinBarrierSession`). Open it with [`GinSession::rail_barrier`] or [`GinSession::world_barrier`].
#[derive(Debug)]
#[must_use = "a barrier session does nothing until synchronised"]
pub struct GinBarrier<'gin, Co: Coop> {
    _gin: PhantomData<&'gin ()>,
    _coop: PhantomData<Co>,
}

impl<'comm> GinSession<'comm> {
    /// Opens GIN barrier `index` of the rail team for `coop`
    /// (`ncclGinBarrierSession(coop, gin, ncclTeamTagRail{}, index)`); `index` below the communicator's rail GIN
    /// barrier count. C++ `gin.rail_barrier(coop, index)`.
    pub fn rail_barrier<Co: Coop>(&self, coop: Co, index: u32) -> GinBarrier<'_, Co> {
        device_only("GinSession::rail_barrier")
    }

    /// Opens GIN barrier `index` of the world team for `coop`
    /// (`ncclGinBarrierSession(coop, gin, ncclTeamTagWorld{}, index)`; NCCL 2.32+ headers, a compile error of the
    /// generated C++ with older ones). C++ `gin.world_barrier(coop, index)`.
    pub fn world_barrier<Co: Coop>(&self, coop: Co, index: u32) -> GinBarrier<'_, Co> {
        device_only("GinSession::world_barrier")
    }
}

impl<Co: Coop> GinBarrier<'_, Co> {
    /// Signals every team peer and waits for all of their signals (fence level relaxed).
    /// C++ `gbar.sync(coop, order)`.
    pub fn sync(&self, coop: Co, order: Order) {
        device_only("GinBarrier::sync")
    }

    /// [`sync`](Self::sync), giving up waiting after `timeout_ns` nanoseconds (see
    /// [`LsaBarrier::wait_timeout`]). C++ `gbar.sync_timeout(coop, order, timeout_ns)`.
    pub fn sync_timeout(&self, coop: Co, order: Order, timeout_ns: u64) -> BarrierResult {
        device_only("GinBarrier::sync_timeout")
    }

    /// Ends the session (epoch write-back and coop sync). C++ `gbar.end()`.
    pub fn end(self) {
        device_only("GinBarrier::end")
    }
}

/// A hybrid barrier session over the whole world: an LSA barrier inside the LSA team, then a GIN barrier across
/// the rail team (`ncclBarrierSession`). Open it with [`DevComm::hybrid_barrier`].
#[derive(Debug)]
#[must_use = "a barrier session does nothing until synchronised"]
pub struct HybridBarrier<'comm, Co: Coop> {
    _comm: PhantomData<&'comm ()>,
    _coop: PhantomData<Co>,
}

impl<C: HasLsa + HasGin> DevComm<C> {
    /// Opens hybrid barrier `index` for `coop` with GIN context `gin`
    /// (`ncclBarrierSession(coop, ncclTeamTagWorld{}, gin, index)`); `index` below both the LSA and the rail GIN
    /// barrier counts. C++ `dev.hybrid_barrier(coop, gin, index)`.
    pub fn hybrid_barrier<'a, Co: Coop>(&'a self, coop: Co, gin: &GinSession<'a>, index: u32) -> HybridBarrier<'a, Co> {
        device_only("DevComm::hybrid_barrier")
    }
}

impl<Co: Coop> HybridBarrier<'_, Co> {
    /// Synchronises the whole world: LSA barrier, then rail GIN barrier, `order` split between them as NCCL does.
    /// C++ `hbar.sync(coop, order)`.
    pub fn sync(&self, coop: Co, order: Order) {
        device_only("HybridBarrier::sync")
    }

    /// Ends the session. C++ `hbar.end()`.
    pub fn end(self) {
        device_only("HybridBarrier::end")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_result_predicates() {
        assert!(BarrierResult::Ok.is_ok());
        assert!(BarrierResult::TimedOut.is_timed_out());
        assert!(BarrierResult::Aborted.is_aborted());
        assert!(!BarrierResult::TimedOut.is_ok());
    }
}
