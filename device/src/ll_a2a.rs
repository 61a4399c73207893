//! LL all-to-all sessions: small messages to every LSA peer through flag-tagged 16-byte lines
//! (`ncclLLA2ASession`), with no separate barrier.

use core::marker::PhantomData;

use crate::caps::HasLsa;
use crate::comm::DevComm;
use crate::coop::Coop;
use crate::device_only;
use crate::numeric::Element;

/// The resource handle of an LL all-to-all buffer (`ncclLLA2AHandle`), created on the host with
/// `ncclLLA2ACreateRequirement` and passed to the kernel as a parameter by value (8 bytes, `#[repr(C)]`: the buffer
/// handle, then the slots per block; C++ `weft::LlA2aHandle`, NCCL's struct inside).
///
/// Its fields are private and it has no constructor: the buffer handle is an offset into the device communicator's
/// resource memory, which NCCL's session indexes unchecked, so a handle safe code could write would let a kernel
/// reach memory it does not own. Only the host runtime, which gets it from NCCL for a device communicator, may make
/// one (through this layout, in an `unsafe` block of its own).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LlA2aHandle {
    buffer: u32,
    slots: u32,
}

impl LlA2aHandle {
    /// The device resource buffer handle (`bufHandle`).
    pub fn buffer(&self) -> u32 {
        self.buffer
    }

    /// Slots per block (`nSlots`).
    pub fn slots(&self) -> u32 {
        self.slots
    }
}

/// An LL all-to-all session of one coop (`ncclLLA2ASession`). Open it with [`DevComm::ll_a2a`]. Same lifecycle
/// rules as a barrier session: not `Copy`, [`end`](Self::end) consumes it.
#[derive(Debug)]
#[must_use = "an all-to-all session does nothing until used"]
pub struct LlA2a<'comm, Co: Coop> {
    _comm: PhantomData<&'comm ()>,
    _coop: PhantomData<Co>,
}

impl<C: HasLsa> DevComm<C> {
    /// Opens the LL all-to-all session of block `block` (below the handle's block count) over the LSA team, for
    /// messages of up to `max_elements` elements per slot
    /// (`ncclLLA2ASession(coop, comm, ncclTeamLsa(comm), handle, block, max_elements)`).
    /// C++ `dev.ll_a2a(coop, handle, block, max_elements)`.
    pub fn ll_a2a<Co: Coop>(&self, coop: Co, handle: LlA2aHandle, block: u32, max_elements: u32) -> LlA2a<'_, Co> {
        device_only("DevComm::ll_a2a")
    }
}

impl<Co: Coop> LlA2a<'_, Co> {
    /// Sends `value` to slot `slot` of LSA peer `peer` (`send`). C++ `a2a.send(peer, slot, value)`.
    pub fn send<T: Element>(&self, peer: u32, slot: u32, value: T) {
        device_only("LlA2a::send")
    }

    /// Sends `value` to slot `slot` of every LSA peer (`bcast`). C++ `a2a.broadcast(slot, value)`.
    pub fn broadcast<T: Element>(&self, slot: u32, value: T) {
        device_only("LlA2a::broadcast")
    }

    /// Waits for and returns the value a peer sent to slot `slot` in this epoch (`recv<T>`).
    /// C++ `a2a.template recv<T>(slot)` (rule R14).
    pub fn recv<T: Element>(&self, slot: u32) -> T {
        device_only("LlA2a::recv")
    }

    /// Ends the current all-to-all epoch; before it, every peer must have been sent at least one value and had
    /// one of its values received (`endEpoch`). C++ `a2a.end_epoch(coop)`.
    pub fn end_epoch(&self, coop: Co) {
        device_only("LlA2a::end_epoch")
    }

    /// Ends the session. C++ `a2a.end()`.
    pub fn end(self) {
        device_only("LlA2a::end")
    }
}
