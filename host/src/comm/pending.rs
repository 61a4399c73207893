//! Non-blocking operations: a value reachable only after NCCL reports completion.

use std::fmt;
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::result::{self, Progress};
use crate::sys::{ncclComm_t, Library};

/// A value that a non-blocking NCCL operation is still producing.
///
/// The value (a `Communicator`, a [`Window`](crate::Window), a [`DevComm`](crate::DevComm)) exists already but
/// is sealed inside until NCCL has written it: until the NCCL group it was created in (if any) has ended, and
/// every communicator the operation involves reports success through `ncclCommGetAsyncError`.
/// [`Pending::poll`] checks once, [`Pending::wait`] polls until done or a deadline.
///
/// On failure or timeout a pending communicator is aborted, so no rank is left waiting on a half-built
/// communicator; dropping an unresolved `Pending` aborts it too. A pending window or device communicator cannot
/// abort the communicator it borrows: if NCCL may still write it, its heap storage (and a window's buffer) is
/// leaked rather than freed under NCCL's feet, and NCCL frees what it made when the communicator is destroyed.
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
    /// Whether the value waits for an NCCL group that is still open on this thread (its outputs are written at
    /// the group's end); the group's failure if it failed.
    #[doc(hidden)]
    fn awaits_group(&self) -> Result<bool, Error> {
        Ok(false)
    }
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
        // Until its group ends NCCL has not even started the operation; the communicators' state says nothing.
        if value.awaits_group()? {
            return Ok(Polled::Pending(Pending::new(value)));
        }
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
    ///
    /// A value created inside an NCCL group that is still open on this thread is an error at once: the group ends
    /// on this thread, so waiting could only time out. End the group first ([`Group::end`](crate::Group::end)).
    pub fn wait(self, timeout: Duration) -> Result<T, Error> {
        if self.value.as_ref().map(Resolve::awaits_group).transpose()? == Some(true) {
            return Err(Error::invalid(
                "self",
                "was created inside an NCCL group that is still open on this thread, and NCCL writes it only when \
                 that group ends: end the group (Group::end) before waiting",
            ));
        }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::group::{test_support, GroupOutcome};

    /// Stands for a window or device communicator: an output NCCL writes into a heap slot at the end of the group
    /// the call was queued in, and that `finish` reads.
    struct Written {
        slot: Box<u64>,
        group: Option<Arc<GroupOutcome>>,
        read: Option<u64>,
    }

    impl Resolve for Written {
        fn handles(&self) -> Vec<(&'static Library, ncclComm_t)> {
            Vec::new()
        }
        fn awaits_group(&self) -> Result<bool, Error> {
            match &self.group {
                Some(group) => group.failure().map_or_else(|| Ok(group.is_open()), Err),
                None => Ok(false),
            }
        }
        fn finish(mut self) -> Result<Self, Error> {
            self.read = Some(*self.slot);
            Ok(self)
        }
    }

    fn queued_in_a_group() -> (Pending<Written>, *mut u64) {
        test_support::open_without_nccl();
        let mut slot = Box::new(0u64);
        // What NCCL keeps: the slot's address, to write at the group's end.
        let nccl_keeps: *mut u64 = &mut *slot;
        let pending = Pending::new(Written { slot, group: crate::group::current(), read: None });
        (pending, nccl_keeps)
    }

    #[test]
    fn an_output_queued_in_a_group_is_read_only_after_the_group_ended() {
        let (pending, nccl_keeps) = queued_in_a_group();
        // Moving the pending value around does not move the heap slot NCCL will write.
        let moved = vec![pending];
        let pending = moved.into_iter().next().unwrap();
        let Polled::Pending(pending) = pending.poll().unwrap() else { panic!("ready inside its group") };
        // The group ends: NCCL writes the output, then the value becomes reachable.
        // SAFETY: the slot is alive (owned by `pending`) and nothing else reads or writes it now.
        unsafe { nccl_keeps.write(42) };
        assert_eq!(test_support::close_without_nccl(Ok(Progress::Done)).unwrap(), Progress::Done);
        let Polled::Ready(written) = pending.poll().unwrap() else { panic!("still pending after its group ended") };
        assert_eq!(written.read, Some(42));
        assert!(std::ptr::eq(&*written.slot, nccl_keeps), "the slot NCCL wrote is the one read");
    }

    #[test]
    fn waiting_inside_the_open_group_is_an_error_not_a_hang() {
        let (pending, _) = queued_in_a_group();
        let started = Instant::now();
        let error = pending.wait(Duration::from_secs(30)).map(|_| ()).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "returned at once");
        assert!(error.to_string().contains("end the group"), "{error}");
        assert_eq!(test_support::close_without_nccl(Ok(Progress::Done)).unwrap(), Progress::Done);
    }

    #[test]
    fn an_output_of_a_failed_group_is_the_group_s_error() {
        let (pending, _) = queued_in_a_group();
        let failure = Error::invalid("test", "the group failed");
        assert!(test_support::close_without_nccl(Err(failure)).is_err());
        let error = pending.poll().map(|_| ()).unwrap_err();
        assert!(error.to_string().contains("never wrote it"), "{error}");
    }
}
