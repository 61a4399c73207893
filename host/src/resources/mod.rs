//! Resources bound to an active communicator: registered buffers, symmetric windows, custom reduction ops
//! (and device communicators, in [`crate::devcomm`]).
//!
//! Each resource borrows the communicator, so the borrow checker forbids finalizing, suspending or
//! destroying it while one is alive — what nccl4py checks at run time. [`Communicator::close_all_resources`]
//! is the explicit form: it releases every resource still registered, idempotently; a resource released
//! that way reports [`Error::InvalidArgument`] when used afterwards and does nothing when dropped.

use std::cell::RefCell;
use std::collections::BTreeMap;

use crate::comm::{Active, Communicator, Mode};
use crate::error::Error;
use crate::result;
use crate::sys::{self, ncclComm_t, Library};

mod memory;
mod redop;
pub(crate) mod uses;
mod window;

pub use memory::DeviceBuffer;
pub(crate) use memory::StreamsUsed;
pub use redop::{CustomOp, PreMulSum, Scalar};
pub use window::{Registration, Window, WindowFlags};

/// A native NCCL resource and how to release it.
#[derive(Debug)]
pub(crate) enum Native {
    Registration(*mut core::ffi::c_void),
    Window(sys::ncclWindow_t),
    RedOp(sys::ncclRedOp_t),
    DevComm(Box<crate::devcomm::DevCommStorage>),
}

impl Native {
    /// Release order for `close_all_resources`: device communicators reference windows, so they go first.
    fn rank(&self) -> u8 {
        match self {
            Native::DevComm(_) => 0,
            Native::Window(_) => 1,
            Native::Registration(_) => 2,
            Native::RedOp(_) => 3,
        }
    }

    fn release(self, library: &Library, comm: ncclComm_t) -> Result<(), Error> {
        // Every arm: the handle was created on `comm` by this library, is released exactly once (it was just
        // removed from the registry), and its owning resource is gone or marked closed.
        match self {
            // SAFETY: see above.
            Native::Registration(handle) => unsafe { result::comm_deregister(library, comm, handle) },
            // SAFETY: see above.
            Native::Window(window) => unsafe { result::comm_window_deregister(library, comm, window) },
            // SAFETY: see above.
            Native::RedOp(op) => unsafe { result::red_op_destroy(library, comm, op) },
            // SAFETY: see above.
            Native::DevComm(storage) => unsafe { result::dev_comm_destroy(library, comm, storage.as_ptr()) },
        }
    }
}

/// The resources currently registered on one communicator.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    next_id: u64,
    live: BTreeMap<u64, Native>,
}

/// The key of one registered resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResourceId(u64);

impl<M: Mode> Communicator<Active, M> {
    pub(crate) fn register_resource(&self, native: Native) -> ResourceId {
        let mut registry = self.registry().borrow_mut();
        let id = registry.next_id;
        registry.next_id += 1;
        registry.live.insert(id, native);
        ResourceId(id)
    }

    /// Releases the resource now (a resource's `Drop`); does nothing if `close_all_resources` already did.
    pub(crate) fn release_resource(&self, id: ResourceId) -> Result<(), Error> {
        let native = self.registry().borrow_mut().live.remove(&id.0);
        match native {
            Some(native) => native.release(self.library(), self.raw()),
            None => Ok(()),
        }
    }

    /// Whether the resource is still registered (not closed by `close_all_resources`).
    pub(crate) fn check_live(&self, id: ResourceId, what: &'static str) -> Result<(), Error> {
        if self.registry().borrow().live.contains_key(&id.0) {
            Ok(())
        } else {
            Err(Error::invalid(what, "was released by close_all_resources; create it again"))
        }
    }

    /// Releases every resource still registered on this communicator (device communicators, windows,
    /// buffer registrations, custom ops), in that order. Idempotent and best effort: every resource is
    /// attempted; the returned errors list the ones NCCL refused. Meant for error paths, so it never
    /// replaces the caller's own error — handle or log what it returns.
    ///
    /// The Rust values of released resources stay alive until they go out of scope; using them afterwards
    /// is an error, dropping them does nothing.
    pub fn close_all_resources(&self) -> Vec<Error> {
        let drained: Vec<Native> = {
            let mut registry = self.registry().borrow_mut();
            let mut all: Vec<Native> = std::mem::take(&mut registry.live).into_values().collect();
            all.sort_by_key(Native::rank);
            all
        };
        drained.into_iter().filter_map(|native| native.release(self.library(), self.raw()).err()).collect()
    }
}

pub(crate) type RegistryCell = RefCell<Registry>;
