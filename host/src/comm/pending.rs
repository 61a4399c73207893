//! Non-blocking operations: a value reachable only after NCCL reports completion.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::result::{self, Progress};
use crate::sys::{ncclComm_t, Library};

/// A value that a non-blocking NCCL operation is still producing.
///
/// The value (typically a `Communicator`) exists already but is sealed inside until every communicator the
/// operation involves reports success through `ncclCommGetAsyncError`: [`Pending::poll`] checks once,
/// [`Pending::wait`] polls until done or a deadline. On failure or timeout the involved communicators are
/// aborted, so no rank is left waiting on a half-built communicator. Dropping an unresolved `Pending`
/// aborts them too.
#[must_use = "a pending operation does nothing useful until it is polled or waited for"]
pub struct Pending<T: Resolve> {
    value: Option<T>,
}

/// The outcome of one [`Pending::poll`].
#[derive(Debug)]
#[must_use]
pub enum Polled<T: Resolve> {
    /// The operation completed; here is its value.
    Ready(T),
    /// Still running; poll again.
    Pending(Pending<T>),
}

/// Values a non-blocking operation can produce.
pub trait Resolve: Sized {
    /// The communicators whose asynchronous state tells whether the operation is done.
    #[doc(hidden)]
    fn handles(&self) -> Vec<(&'static Library, ncclComm_t)>;
    /// Completes the value once NCCL reports success (e.g. reads the new communicator's rank and size).
    #[doc(hidden)]
    fn finish(self) -> Result<Self, Error>;
}

impl<T: Resolve> Pending<T> {
    pub(crate) fn new(value: T) -> Pending<T> {
        Pending { value: Some(value) }
    }

    /// Checks once whether the operation has completed.
    ///
    /// An asynchronous error aborts the involved communicators and is returned.
    pub fn poll(mut self) -> Result<Polled<T>, Error> {
        let Some(value) = self.value.take() else {
            return Err(Error::invalid("self", "this pending operation was already resolved"));
        };
        let mut done = true;
        for (library, raw) in value.handles() {
            // SAFETY: the handle belongs to `value`, which is alive and owns it.
            match unsafe { result::comm_get_async_error(library, raw) } {
                Ok(Progress::Done) => {}
                Ok(Progress::InProgress) => done = false,
                // Dropping `value` aborts every communicator it owns.
                Err(error) => return Err(error),
            }
        }
        if done {
            value.finish().map(Polled::Ready)
        } else {
            Ok(Polled::Pending(Pending::new(value)))
        }
    }

    /// Polls until the operation completes, an error occurs, or `timeout` passes.
    ///
    /// On timeout the involved communicators are aborted and [`Error::Timeout`] is returned: a rank whose
    /// peers never join ends here instead of hanging.
    pub fn wait(self, timeout: Duration) -> Result<T, Error> {
        let deadline = Instant::now() + timeout;
        let mut pending = self;
        let mut pause = Duration::from_micros(20);
        loop {
            match pending.poll()? {
                Polled::Ready(value) => return Ok(value),
                Polled::Pending(again) => pending = again,
            }
            if Instant::now() >= deadline {
                // Dropping the pending value aborts its communicators.
                drop(pending);
                return Err(Error::Timeout { operation: "a non-blocking NCCL operation", after: timeout });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }
}

impl<T: Resolve> fmt::Debug for Pending<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pending").field("resolved", &self.value.is_none()).finish()
    }
}

impl<T: Resolve> Resolve for Option<T> {
    fn handles(&self) -> Vec<(&'static Library, ncclComm_t)> {
        self.as_ref().map(Resolve::handles).unwrap_or_default()
    }
    fn finish(self) -> Result<Self, Error> {
        self.map(Resolve::finish).transpose()
    }
}

impl<T: Resolve> Resolve for Vec<T> {
    fn handles(&self) -> Vec<(&'static Library, ncclComm_t)> {
        self.iter().flat_map(Resolve::handles).collect()
    }
    fn finish(self) -> Result<Self, Error> {
        self.into_iter().map(Resolve::finish).collect()
    }
}

/// Operations that produce nothing but completion (finalize on a non-blocking communicator yields the
/// finalized communicator itself, so this is only for group ends).
impl Resolve for () {
    fn handles(&self) -> Vec<(&'static Library, ncclComm_t)> {
        Vec::new()
    }
    fn finish(self) -> Result<Self, Error> {
        Ok(())
    }
}
