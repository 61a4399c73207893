//! NCCL groups: several operations (on one or many communicators) launched together.

use std::cell::Cell;

use crate::error::Error;
use crate::result::{self, Progress};

thread_local! {
    /// Groups open on this thread (NCCL's groups nest and are per thread).
    static OPEN: Cell<usize> = const { Cell::new(0) };
}

/// Whether this thread is inside an NCCL group: collective calls then only queue, and complete at the group's end.
pub(crate) fn in_group() -> bool {
    OPEN.with(Cell::get) > 0
}

/// An open NCCL group (`ncclGroupStart`); operations issued while it lives are fused and launched by
/// [`Group::end`] (or by `Drop`, which logs a failure it cannot return).
#[derive(Debug)]
#[must_use = "the group's operations launch when it ends"]
pub struct Group {
    ended: bool,
}

impl Group {
    /// Opens a group.
    pub fn start() -> Result<Group, Error> {
        result::group_start(crate::sys::library()?)?;
        OPEN.with(|open| open.set(open.get() + 1));
        Ok(Group { ended: false })
    }

    /// Closes the group and launches its operations (`ncclGroupEnd`). Returns whether NCCL reports them
    /// still in progress (only with non-blocking communicators; poll those communicators then).
    pub fn end(mut self) -> Result<bool, Error> {
        self.ended = true;
        OPEN.with(|open| open.set(open.get().saturating_sub(1)));
        let progress = result::group_end(crate::sys::library()?)?;
        Ok(progress == Progress::InProgress)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        OPEN.with(|open| open.set(open.get().saturating_sub(1)));
        match crate::sys::library().and_then(result::group_end) {
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "ncclGroupEnd (at drop) failed"),
        }
    }
}

/// Runs `body` inside a group: every operation it issues is launched together when it returns.
///
/// ```no_run
/// # fn demo(comm: &weft_host::Communicator, a: &cudarc::driver::CudaSlice<f32>, b: &mut cudarc::driver::CudaSlice<f32>, s: &cudarc::driver::CudaStream) -> Result<(), weft_host::Error> {
/// weft_host::group(|| {
///     comm.send(a, 1, s)?;
///     comm.recv(b, 1, s)
/// })?;
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
