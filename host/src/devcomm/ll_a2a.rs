//! The LL all-to-all handle a kernel's `LlA2aHandle` parameter takes, as the device communicator made it.
//!
//! On the device, `ncclLLA2ASession` turns the handle's resource-buffer handle and slot count into addresses inside
//! NCCL's resource window (`line = buffer + block * (1 + 2 * nSlots) + …`). A handle built by hand could name any
//! offset: so the launcher takes this host type, whose fields are private and which only
//! [`DevComm::ll_a2a_handle`] makes (from `ncclLLA2ACreateRequirement`, when the device communicator was created
//! with [`Requirements::ll_a2a`](super::Requirements::ll_a2a)), and a launch checks that its device communicator
//! is the one the handle came from.

use weft_device::caps::CapabilitySet;

use super::DevComm;
use crate::comm::Mode;
use crate::sys;

/// The LL all-to-all handle of one device communicator (NCCL's `ncclLLA2AHandle`), for a kernel's `LlA2aHandle`
/// parameter. Borrowed from its [`DevComm`]: a launch passing it with another device communicator is refused.
#[derive(Clone, Copy)]
pub struct LlA2aHandle<'dev> {
    raw: sys::ncclLLA2AHandle_t,
    /// The identity of the device communicator it belongs to (its outputs' heap address, stable while it lives).
    owner: usize,
    dev: std::marker::PhantomData<&'dev ()>,
}

impl std::fmt::Debug for LlA2aHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlA2aHandle").field("buffer", &self.buffer()).field("slots", &self.slots()).finish()
    }
}

impl LlA2aHandle<'_> {
    /// The resource buffer NCCL assigned (`bufHandle`).
    pub fn buffer(&self) -> u32 {
        self.raw._bindgen_opaque_blob[0]
    }

    /// Slots per block (`nSlots`).
    pub fn slots(&self) -> u32 {
        self.raw._bindgen_opaque_blob[1]
    }

    /// The kernel argument: NCCL's 8-byte struct.
    pub(crate) fn kernel_arg(&self) -> sys::ncclLLA2AHandle_t {
        self.raw
    }

    /// The device communicator it belongs to (see [`DevComm::identity`]).
    pub(crate) fn owner(&self) -> usize {
        self.owner
    }
}

impl<C: CapabilitySet, M: Mode> DevComm<'_, C, M> {
    /// The LL all-to-all handle, if the device communicator was created with
    /// [`Requirements::ll_a2a`](super::Requirements::ll_a2a) and NCCL has written it.
    pub fn ll_a2a_handle(&self) -> Option<LlA2aHandle<'_>> {
        self.id.as_ref()?;
        let raw = self.outputs.ll_a2a?;
        Some(LlA2aHandle { raw, owner: self.identity(), dev: std::marker::PhantomData })
    }

    /// A value that tells this device communicator from every other one alive: the heap address of what NCCL wrote.
    pub(crate) fn identity(&self) -> usize {
        std::ptr::from_ref(&*self.outputs) as usize
    }
}
