//! NCCL groups: several operations (on one or many communicators) launched together.
//!
//! Inside a group NCCL only queues collective setup calls (window registration, device communicator creation)
//! and writes their outputs when the outermost group ends (on non-blocking communicators, when the group's work
//! completes). Values created in a group therefore come back as a [`Pending`](crate::Pending) that records the
//! group and yields its value only once that group has ended and NCCL reports completion.

use std::cell::{Cell, RefCell};
use std::sync::{Arc, Mutex};

use crate::error::{Error, ResultCode};
use crate::result::{self, Progress};
use crate::sys::{ncclComm_t, Library};

thread_local! {
    /// Groups open on this thread (NCCL's groups nest and are per thread).
    static OPEN: Cell<usize> = const { Cell::new(0) };
    /// The outermost group open on this thread: only its end makes NCCL run what the group queued.
    static OUTERMOST: RefCell<Option<Arc<GroupOutcome>>> = const { RefCell::new(None) };
}

/// Whether this thread is inside an NCCL group: collective calls then only queue, and complete at the group's end.
pub(crate) fn in_group() -> bool {
    OPEN.with(Cell::get) > 0
}

/// The outermost group open on this thread, if any.
pub(crate) fn current() -> Option<Arc<GroupOutcome>> {
    OUTERMOST.with(|outermost| outermost.borrow().clone())
}

/// What became of one outermost NCCL group, shared by the values created inside it.
#[derive(Debug, Default)]
pub(crate) struct GroupOutcome {
    state: Mutex<GroupState>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
enum GroupState {
    /// `ncclGroupEnd` has not run yet: nothing queued in the group has happened.
    #[default]
    Open,
    /// `ncclGroupEnd` returned; `in_progress` when it answered `ncclInProgress` (non-blocking communicators:
    /// their asynchronous state tells when the work is done).
    Ended { in_progress: bool },
    /// `ncclGroupEnd` failed: NCCL ran nothing more of the group and writes none of its outputs.
    Failed { code: ResultCode, description: String },
}

impl GroupOutcome {
    fn set(&self, state: GroupState) {
        *self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = state;
    }

    fn get(&self) -> GroupState {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Whether the group is still open (its outputs are not written, and cannot be on this thread until it ends).
    pub(crate) fn is_open(&self) -> bool {
        self.get() == GroupState::Open
    }

    /// The group's failure, if it failed.
    pub(crate) fn failure(&self) -> Option<Error> {
        match self.get() {
            GroupState::Failed { code, description } => Some(Error::Nccl {
                call: "ncclGroupEnd",
                code,
                description,
                last_error: "the NCCL group this value was created in failed, so NCCL never wrote it".into(),
            }),
            _ => None,
        }
    }
}

/// When an output NCCL writes later (a window handle, a device communicator) is written: at the end of the group it
/// was queued in, or when the operation on a non-blocking communicator completes.
#[derive(Debug, Clone)]
pub(crate) struct Completion {
    library: &'static Library,
    comm: ncclComm_t,
    blocking: bool,
    group: Option<Arc<GroupOutcome>>,
    /// Set once the outputs were read: NCCL writes nothing more.
    settled: bool,
}

impl Completion {
    /// For a call just made on `comm` (blocking or not), inside the current group if one is open.
    pub(crate) fn new(library: &'static Library, comm: ncclComm_t, blocking: bool) -> Completion {
        Completion { library, comm, blocking, group: current(), settled: false }
    }

    /// Records that the outputs were read after completion.
    pub(crate) fn settle(&mut self) {
        self.settled = true;
    }

    /// Whether [`settle`](Completion::settle) was called.
    pub(crate) fn settled(&self) -> bool {
        self.settled
    }

    /// Whether the group the call was queued in is still open (`Err` if it failed).
    pub(crate) fn awaits_group(&self) -> Result<bool, Error> {
        match &self.group {
            Some(group) => match group.failure() {
                Some(error) => Err(error),
                None => Ok(group.is_open()),
            },
            None => Ok(false),
        }
    }

    /// Whether NCCL has written the outputs: `Done`, `InProgress`, or the error that means it never will.
    /// Never blocks.
    pub(crate) fn progress(&self) -> Result<Progress, Error> {
        if self.awaits_group()? {
            return Ok(Progress::InProgress);
        }
        if self.blocking {
            // A blocking call, or the end of a group of blocking communicators, returns only once done.
            return Ok(Progress::Done);
        }
        // SAFETY: the communicator outlives every value that holds this completion (they borrow it).
        unsafe { result::comm_get_async_error(self.library, self.comm) }
    }
}

/// An open NCCL group (`ncclGroupStart`); operations issued while it lives are fused and launched by
/// [`Group::end`] (or by `Drop`, which logs a failure it cannot return). Buffer-taking operations are not issued
/// this way (they refuse inside a group): a [`Batch`](crate::Batch) groups those.
///
/// Window registrations and device communicators created in a group ([`Communicator::window_in`],
/// [`Communicator::dev_comm_in`]) are [`Pending`](crate::Pending) until the outermost group ends.
///
/// [`Communicator::window_in`]: crate::Communicator::window_in
/// [`Communicator::dev_comm_in`]: crate::Communicator::dev_comm_in
#[derive(Debug)]
#[must_use = "the group's operations launch when it ends"]
pub struct Group {
    ended: bool,
}

impl Group {
    /// Opens a group.
    pub fn start() -> Result<Group, Error> {
        open(|| result::group_start(crate::sys::library()?))?;
        Ok(Group { ended: false })
    }

    /// Closes the group and launches its operations (`ncclGroupEnd`). Returns whether NCCL reports them
    /// still in progress (only with non-blocking communicators; poll those communicators then).
    pub fn end(mut self) -> Result<bool, Error> {
        self.ended = true;
        let progress = close(|| result::group_end(crate::sys::library()?));
        Ok(progress? == Progress::InProgress)
    }
}

/// `ncclGroupStart` (`start`); the outermost group gets a fresh outcome.
fn open(start: impl FnOnce() -> Result<(), Error>) -> Result<(), Error> {
    start()?;
    if OPEN.with(|open| open.replace(open.get() + 1)) == 0 {
        OUTERMOST.with(|outermost| *outermost.borrow_mut() = Some(Arc::default()));
    }
    Ok(())
}

/// `ncclGroupEnd` (`end`) for the innermost open group; records the outcome when it was the outermost.
fn close(end: impl FnOnce() -> Result<Progress, Error>) -> Result<Progress, Error> {
    let depth = OPEN.with(|open| {
        let depth = open.get().saturating_sub(1);
        open.set(depth);
        depth
    });
    let outcome = end();
    if depth == 0 {
        if let Some(group) = OUTERMOST.with(|outermost| outermost.borrow_mut().take()) {
            group.set(match &outcome {
                Ok(progress) => GroupState::Ended { in_progress: *progress == Progress::InProgress },
                Err(error) => GroupState::Failed {
                    code: error.nccl_code().unwrap_or(ResultCode::InternalError),
                    description: error.to_string(),
                },
            });
        }
    }
    outcome
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        if let Err(error) = close(|| result::group_end(crate::sys::library()?)) {
            tracing::error!(%error, "ncclGroupEnd (at drop) failed");
        }
    }
}

/// Runs `body` inside a group: every operation it issues is launched together when it returns.
///
/// For setup calls ([`Communicator::window_in`](crate::Communicator::window_in),
/// [`Communicator::dev_comm_in`](crate::Communicator::dev_comm_in), non-blocking inits) and signals. Collectives and
/// point-to-point calls refuse to run inside a group (NCCL would read their buffers only at the group's end, after
/// their borrows ended): group those with a [`Batch`](crate::Batch), which holds the buffers until it has launched.
///
/// ```no_run
/// # fn demo(comm: &weft_host::Communicator, a: &cudarc::driver::CudaSlice<f32>, b: &mut cudarc::driver::CudaSlice<f32>, s: &cudarc::driver::CudaStream) -> Result<(), weft_host::Error> {
/// let mut batch = weft_host::Batch::new();
/// batch.send(comm, a, 1, s)?;
/// batch.recv(comm, b, 1, s)?;
/// batch.launch()?;
/// # Ok(()) }
/// ```
pub fn group<R>(body: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
    let group = Group::start()?;
    let value = body();
    let ended = group.end();
    let value = value?;
    ended?;
    Ok(value)
}

/// Test hooks: open and close a group without NCCL (the bookkeeping of `Group::start` / `Group::end`).
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub(crate) fn open_without_nccl() {
        open(|| Ok(())).expect("no NCCL call to fail");
    }

    pub(crate) fn close_without_nccl(outcome: Result<Progress, Error>) -> Result<Progress, Error> {
        close(|| outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome_of_nested_groups(outer_end: Result<Progress, Error>) -> (bool, bool, Result<bool, Error>) {
        open(|| Ok(())).unwrap();
        let outer = current().expect("the outermost group is recorded");
        open(|| Ok(())).unwrap();
        let inner_sees_outer = current().is_some_and(|g| Arc::ptr_eq(&g, &outer));
        assert_eq!(close(|| Ok(Progress::Done)).unwrap(), Progress::Done);
        let open_after_inner_end = outer.is_open();
        let _ = close(|| outer_end);
        assert!(!in_group() && current().is_none());
        let completion = Completion {
            library: leak_library(),
            comm: std::ptr::null_mut(),
            blocking: true,
            group: Some(outer),
            settled: false,
        };
        (inner_sees_outer, open_after_inner_end, completion.awaits_group())
    }

    /// A library handle is only needed for non-blocking completions, which these tests do not poll.
    fn leak_library() -> &'static Library {
        static LIBRARY: std::sync::OnceLock<Library> = std::sync::OnceLock::new();
        LIBRARY.get_or_init(|| {
            let path = std::env::var_os("WEFT_TEST_LIBNCCL_2_28_9")
                .expect("WEFT_TEST_LIBNCCL_2_28_9 is not set: run the tests through `cargo xtask test`");
            Library::open(path).expect("the provisioned libnccl 2.28.9 loads without a GPU")
        })
    }

    #[test]
    fn values_of_a_nested_group_wait_for_the_outermost_end() {
        let (shared, open_after_inner, after_outer) = outcome_of_nested_groups(Ok(Progress::Done));
        assert!(shared, "an inner group records into the outermost group's outcome");
        assert!(open_after_inner, "NCCL runs nothing at an inner ncclGroupEnd: the outputs are not written yet");
        assert!(!after_outer.unwrap(), "after the outermost end the outputs are written");
    }

    #[test]
    fn values_of_a_failed_group_report_that_nccl_never_wrote_them() {
        let failed = Error::Nccl {
            call: "ncclGroupEnd",
            code: ResultCode::InvalidUsage,
            description: "invalid usage".into(),
            last_error: String::new(),
        };
        let (_, _, after) = outcome_of_nested_groups(Err(failed));
        let error = after.unwrap_err();
        assert_eq!(error.nccl_code(), Some(ResultCode::InvalidUsage));
        assert!(error.to_string().contains("never wrote it"), "{error}");
    }

    #[test]
    fn a_blocking_completion_outside_a_group_is_done_at_once() {
        open(|| Ok(())).unwrap();
        let in_group = Completion::new(leak_library(), std::ptr::null_mut(), true);
        assert_eq!(in_group.progress().unwrap(), Progress::InProgress, "inside the group nothing is written");
        assert_eq!(close(|| Ok(Progress::Done)).unwrap(), Progress::Done);
        assert_eq!(in_group.progress().unwrap(), Progress::Done);
        let outside = Completion::new(leak_library(), std::ptr::null_mut(), true);
        assert!(outside.group.is_none());
        assert_eq!(outside.progress().unwrap(), Progress::Done);
    }
}
