//! Resources bound to an active communicator: registered buffers, symmetric windows, custom reduction ops
//! (and device communicators, in [`crate::devcomm`]).
//!
//! Each resource borrows the communicator, so the borrow checker forbids finalizing, suspending or
//! destroying it while one is alive — what nccl4py checks at run time. [`Communicator::close_all_resources`]
//! is the explicit form: it releases every resource still registered, idempotently, each once the work this rank
//! enqueued on it has finished; a resource released that way reports [`Error::InvalidArgument`] when used
//! afterwards (a launch, a CUDA graph's replay) and does nothing when dropped.
//!
//! Memory registered with NCCL (a window's part, a registration's buffer) is owned by the resource and reachable
//! only through views ([`RegisteredMut`], [`Registered`]): its elements can be read and written, but the memory
//! itself cannot be replaced or freed while it is registered.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::comm::{Active, Communicator, Mode};
use crate::error::Error;
use crate::result;
use crate::sys::{self, ncclComm_t, Library};

mod liveness;
mod memory;
mod redop;
mod registered;
mod registration;
mod symmetry;
pub(crate) mod uses;
mod window;

pub(crate) use liveness::{CloseWatch, Liveness};
pub use memory::DeviceBuffer;
pub(crate) use memory::StreamsUsed;
pub use redop::{CustomOp, PreMulSum, Scalar};
pub use registered::{Registered, RegisteredMut};
pub use registration::Registration;
pub use window::{Window, WindowFlags};

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

/// The work that may still use a registered resource, which releasing it must wait for: for memory, its buffer's
/// recorded uses; for a device communicator, the streams kernels taking it were launched on (a CUDA graph's replay
/// stream among them).
pub(crate) trait InUse: Send + Sync {
    /// Waits (polling, never for the whole device) until nothing this rank enqueued still uses the resource;
    /// [`Error::Stalled`] if that work does not finish.
    fn wait_for_uses(&self) -> Result<(), Error>;
}

impl<T: Send + Sync> InUse for DeviceBuffer<T> {
    fn wait_for_uses(&self) -> Result<(), Error> {
        DeviceBuffer::wait_for_uses(self)
    }
}

impl InUse for StreamsUsed {
    fn wait_for_uses(&self) -> Result<(), Error> {
        self.wait()
    }
}

/// One registered resource: its native handle, the work that may use it, and the flag its Rust value reads.
#[derive(Debug)]
struct Entry {
    native: Native,
    uses: Option<Arc<dyn InUse>>,
    released: Arc<AtomicBool>,
}

impl std::fmt::Debug for dyn InUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InUse")
    }
}

/// The resources currently registered on one communicator.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    next_id: u64,
    live: BTreeMap<u64, Entry>,
    /// How many times `close_all_resources` released something: a CUDA graph recorded over this communicator
    /// replays only while it is what the graph saw ([`CloseWatch`]).
    closes: Arc<AtomicU64>,
}

/// The key of one registered resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ResourceId(u64);

impl<M: Mode> Communicator<Active, M> {
    /// Registers `native`, whose release first waits for `uses`; returns its key and the flag its value reads.
    pub(crate) fn register_tracked(&self, native: Native, uses: Option<Arc<dyn InUse>>) -> (ResourceId, Liveness) {
        insert(self.registry(), native, uses)
    }

    /// What a CUDA graph recording work of this communicator keeps ([`CloseWatch`]).
    pub(crate) fn close_watch(&self) -> CloseWatch {
        watch(self.registry())
    }

    /// Releases the resource now (a resource's `Drop`, once its work finished); does nothing if
    /// `close_all_resources` already did.
    pub(crate) fn release_resource(&self, id: ResourceId) -> Result<(), Error> {
        let entry = self.registry().borrow_mut().live.remove(&id.0);
        match entry {
            Some(entry) => {
                entry.released.store(true, Ordering::Release);
                entry.native.release(self.library(), self.raw())
            }
            None => Ok(()),
        }
    }

    /// Releases every resource still registered on this communicator (device communicators, windows,
    /// buffer registrations, custom ops), in that order. Idempotent and best effort: every resource is
    /// attempted; the returned errors list the ones NCCL refused. Meant for error paths, so it never
    /// replaces the caller's own error — handle or log what it returns.
    ///
    /// Each resource is released only once the work this rank enqueued on it has finished (kernels, collectives,
    /// and the replays of CUDA graphs that recorded it), waited for by polling the streams it was used on, never the
    /// whole device. A resource whose work does not finish ([`Error::Stalled`]) stays registered and usable, and its
    /// error is among those returned: releasing it would pull NCCL's state and memory from under that work.
    ///
    /// The Rust values of released resources stay alive until they go out of scope; using them afterwards
    /// is an error ([`Error::InvalidArgument`] from a launch or a query), dropping them does nothing. A CUDA graph
    /// recorded over this communicator refuses to replay once this released anything: recapture it.
    pub fn close_all_resources(&self) -> Vec<Error> {
        close_all(self.registry(), |native| native.release(self.library(), self.raw()))
    }
}

/// Registers `native` in `registry` ([`Communicator::register_tracked`]).
fn insert(registry: &RegistryCell, native: Native, uses: Option<Arc<dyn InUse>>) -> (ResourceId, Liveness) {
    let mut registry = registry.borrow_mut();
    let id = registry.next_id;
    registry.next_id += 1;
    let released = Arc::new(AtomicBool::new(false));
    registry.live.insert(id, Entry { native, uses, released: released.clone() });
    (ResourceId(id), Liveness::new(released))
}

/// A watch on `registry`'s releases by `close_all_resources`, from now ([`CloseWatch`]).
fn watch(registry: &RegistryCell) -> CloseWatch {
    CloseWatch::new(registry.borrow().closes.clone())
}

/// `close_all_resources` on `registry`, releasing each native handle with `release`: in release order, each once
/// its uses finished; a resource whose wait fails stays registered (and usable). Returns the errors.
fn close_all(registry: &RegistryCell, mut release: impl FnMut(Native) -> Result<(), Error>) -> Vec<Error> {
    let drained: Vec<(u64, Entry)> = {
        let mut registry = registry.borrow_mut();
        let mut all: Vec<(u64, Entry)> = std::mem::take(&mut registry.live).into_iter().collect();
        all.sort_by_key(|(_, entry)| entry.native.rank());
        all
    };
    let mut errors = Vec::new();
    let mut released_any = false;
    for (id, entry) in drained {
        if let Some(Err(error)) = entry.uses.as_ref().map(|uses| uses.wait_for_uses()) {
            // Its work may still run: keep it registered (its own drop waits again, and leaks it if that fails).
            errors.push(error);
            registry.borrow_mut().live.insert(id, entry);
            continue;
        }
        if !released_any {
            released_any = true;
            // Before NCCL releases anything: no graph recorded over this communicator replays from now on.
            registry.borrow().closes.fetch_add(1, Ordering::AcqRel);
        }
        entry.released.store(true, Ordering::Release);
        if let Err(error) = release(entry.native) {
            errors.push(error);
        }
    }
    errors
}

pub(crate) type RegistryCell = RefCell<Registry>;

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    use super::*;

    /// Work on a resource: finished or stuck, counting the waits for it.
    struct Work {
        finishes: bool,
        waits: AtomicUsize,
    }

    impl Work {
        fn new(finishes: bool) -> Arc<Work> {
            Arc::new(Work { finishes, waits: AtomicUsize::new(0) })
        }
    }

    impl InUse for Work {
        fn wait_for_uses(&self) -> Result<(), Error> {
            self.waits.fetch_add(1, Ordering::SeqCst);
            if self.finishes {
                Ok(())
            } else {
                Err(Error::Stalled { operation: "the test's stuck kernel", after: Duration::from_secs(1) })
            }
        }
    }

    fn handle(value: usize) -> *mut core::ffi::c_void {
        value as *mut core::ffi::c_void
    }

    #[test]
    fn close_all_waits_for_each_resources_work_and_keeps_what_is_still_in_use() {
        let registry = RegistryCell::default();
        let (window_work, stuck_work) = (Work::new(true), Work::new(false));
        let (_, window) = insert(&registry, Native::Window(handle(1).cast()), Some(window_work.clone()));
        let (_, stuck) = insert(&registry, Native::Registration(handle(2)), Some(stuck_work.clone()));
        let (_, op) = insert(&registry, Native::RedOp(sys::ncclRedOp_t(7)), None);
        let graph = watch(&registry);
        assert!(graph.check().is_ok());

        let mut released = Vec::new();
        let errors = close_all(&registry, |native| {
            // Released only after its work was waited for.
            if let Native::Window(_) = native {
                assert_eq!(window_work.waits.load(Ordering::SeqCst), 1, "released before its work finished");
            }
            released.push(native.rank());
            Ok(())
        });
        assert_eq!(released, [1, 3], "the window, then the op; never the registration still in use");
        assert!(matches!(errors.as_slice(), [Error::Stalled { .. }]), "{errors:?}");
        assert!(matches!(window.check("window"), Err(Error::InvalidArgument { argument: "window", .. })));
        assert!(op.check("op").is_err());
        assert!(stuck.check("registration").is_ok(), "a resource still in use stays usable");
        assert_eq!(registry.borrow().live.len(), 1, "and registered");
        // A graph recorded before the release refuses to replay; one recorded after does not.
        let refused = graph.check().unwrap_err().to_string();
        assert!(refused.contains("capture the graph again"), "{refused}");
        let later = watch(&registry);
        assert!(later.check().is_ok());

        // Again: the stuck one is waited for again and kept; nothing was released, so later graphs still replay.
        let errors = close_all(&registry, |_| panic!("nothing may be released"));
        assert_eq!(errors.len(), 1);
        assert_eq!(stuck_work.waits.load(Ordering::SeqCst), 2);
        assert!(later.check().is_ok());
    }

    #[test]
    fn close_all_releases_device_communicators_first_and_reports_what_nccl_refused() {
        let registry = RegistryCell::default();
        insert(&registry, Native::RedOp(sys::ncclRedOp_t(3)), None);
        insert(&registry, Native::Registration(handle(2)), Some(Work::new(true)));
        insert(&registry, Native::Window(handle(1).cast()), Some(Work::new(true)));
        let storage = Box::new(crate::devcomm::DevCommStorage::zeroed(64));
        insert(&registry, Native::DevComm(storage), Some(Work::new(true)));
        let mut order = Vec::new();
        let errors = close_all(&registry, |native| {
            order.push(native.rank());
            match native {
                Native::Registration(_) => Err(Error::invalid("registration", "refused by the test")),
                _ => Ok(()),
            }
        });
        assert_eq!(order, [0, 1, 2, 3], "device communicators, windows, registrations, ops");
        assert_eq!(errors.len(), 1);
        assert!(registry.borrow().live.is_empty(), "a release NCCL refused is not retried");
        assert!(close_all(&registry, |_| panic!("idempotent")).is_empty());
    }
}
