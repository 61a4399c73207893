//! The flags a registered resource's value and the CUDA graphs recorded over it read to know whether
//! `close_all_resources` released it (one atomic load each: launches and replays read them).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Error;

/// Whether a registered resource is still registered, read without the registry: a launch's check is one atomic
/// load. Set by `close_all_resources` (after the resource's work finished, before NCCL releases it).
#[derive(Debug, Clone)]
pub(crate) struct Liveness(Arc<AtomicBool>);

impl Liveness {
    pub(super) fn new(released: Arc<AtomicBool>) -> Liveness {
        Liveness(released)
    }

    /// `Ok` while registered; the error names `what` and the fix once `close_all_resources` released it.
    pub(crate) fn check(&self, what: &'static str) -> Result<(), Error> {
        if self.0.load(Ordering::Acquire) {
            Err(Error::invalid(what, "was released by close_all_resources; create it again"))
        } else {
            Ok(())
        }
    }
}

/// What a CUDA graph recorded over a communicator keeps to refuse replays once `close_all_resources` released any
/// of the communicator's resources: a recorded kernel or collective may use one (a window, a device communicator, or
/// NCCL's own symmetric kernels on window memory), and a replay would then touch NCCL state that is gone.
#[derive(Debug, Clone)]
pub struct CloseWatch {
    closes: Arc<AtomicU64>,
    seen: u64,
}

impl CloseWatch {
    /// Watches the registry whose count of `close_all_resources` releases is `closes`, from its value now.
    pub(super) fn new(closes: Arc<AtomicU64>) -> CloseWatch {
        let seen = closes.load(Ordering::Acquire);
        CloseWatch { closes, seen }
    }

    /// `Ok` while no resource of the communicator was released by `close_all_resources` since the watch was made.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.closes.load(Ordering::Acquire) == self.seen {
            Ok(())
        } else {
            Err(Error::invalid(
                "graph",
                "close_all_resources released resources of a communicator this graph was recorded on (its windows \
                 or device communicators may be among them): capture the graph again with live resources",
            ))
        }
    }

    /// Whether both watch the same communicator's registry.
    pub(crate) fn same_registry(&self, other: &CloseWatch) -> bool {
        Arc::ptr_eq(&self.closes, &other.closes)
    }
}
