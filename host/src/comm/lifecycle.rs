//! State transitions: finalize, destroy, revoke, suspend/resume, split, shrink, grow.

use super::init::UniqueId;
use super::{Active, Communicator, Finalized, Initialized, Mode, Revoked, Suspended, TransitionError, Uninit, NULL};
use crate::config::Config;
use crate::error::Error;
use crate::result::{self, Progress};
use crate::sys;

/// What `suspend` releases (`ncclCommSuspend` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SuspendFlags(i32);

impl SuspendFlags {
    /// Release the communicator's dynamic GPU memory (`NCCL_SUSPEND_MEM`).
    pub const MEMORY: SuspendFlags = SuspendFlags(sys::NCCL_SUSPEND_MEM as i32);
    /// Release nothing beyond what NCCL always releases.
    pub const NONE: SuspendFlags = SuspendFlags(0);
}

type Transition<From, To, M> = Result<<M as Mode>::Wrap<Communicator<To, M>>, TransitionError<Communicator<From, M>>>;

impl<S: Initialized, M: Mode> Communicator<S, M> {
    /// Runs `call` on the raw handle; on success moves into state `T`, on failure hands `self` back.
    fn transition<T: Initialized>(
        self,
        call: impl FnOnce(&'static sys::Library, sys::ncclComm_t) -> Result<Progress, Error>,
    ) -> Transition<S, T, M> {
        match call(self.library(), self.raw()) {
            Ok(progress) => Ok(M::wrap(self.into_state::<T>(), progress)),
            Err(error) => Err(TransitionError::new(self, error)),
        }
    }
}

impl<M: Mode> Communicator<Active, M> {
    /// Flushes outstanding operations and releases resources shared with other ranks
    /// (`ncclCommFinalize`); collective over all ranks. Destroy the result to free the rest.
    ///
    /// Every resource borrowing the communicator (windows, registrations, device communicators) must be
    /// gone first: the borrow checker enforces it.
    pub fn finalize(self) -> Transition<Active, Finalized, M> {
        self.leave_launch_gate("finalized its communicator");
        // SAFETY: `raw` is our live, active communicator; finalize is allowed in this state.
        self.transition(|library, raw| unsafe { result::comm_finalize(library, raw) })
    }

    /// Stops outstanding operations without waiting (`ncclCommRevoke`). A revoked communicator can only be
    /// shrunk, destroyed or aborted.
    pub fn revoke(self) -> Transition<Active, Revoked, M> {
        self.leave_launch_gate("revoked its communicator");
        // SAFETY: as in `finalize`.
        self.transition(|library, raw| unsafe { result::comm_revoke(library, raw, sys::NCCL_REVOKE_DEFAULT as i32) })
    }

    /// Releases the communicator's suspendable resources (`ncclCommSuspend`, NCCL 2.29+) until [`resume`].
    ///
    /// [`resume`]: Communicator::resume
    pub fn suspend(self, flags: SuspendFlags) -> Transition<Active, Suspended, M> {
        // SAFETY: as in `finalize`.
        self.transition(|library, raw| unsafe { result::comm_suspend(library, raw, flags.0) })
    }

    /// Splits the communicator by `color` (`ncclCommSplit`); collective over all ranks. Ranks passing the
    /// same color form a new communicator, ordered by `key` (then by old rank). `color: None` opts out and
    /// yields no communicator.
    ///
    /// Where weft knows this communicator's ranks in this process ([`spmd`](crate::spmd()),
    /// [`sharing_gpu_in`](Communicator::sharing_gpu_in)), a blocking child knows its own: its ranks sharing a GPU
    /// line up after its setup calls, and under `NCCL_LAUNCH_MODE=GROUP` before its launches, as the parent's do
    /// (docs/multi-rank.md, "Launch mode"). They learn each other's colors first, so a rank of this process that
    /// never calls the split is [`Error::PeerFailed`] or [`Error::Stalled`] for the others, not a wait in NCCL.
    pub fn split(
        &self,
        color: Option<u32>,
        key: i32,
        config: Option<&Config>,
    ) -> Result<M::Wrap<Option<Communicator<Active, M>>>, Error> {
        let color = match color {
            None => sys::NCCL_SPLIT_NOCOLOR,
            Some(c) => i32::try_from(c).map_err(|_| Error::invalid("color", format!("{c} exceeds i32::MAX")))?,
        };
        let mut raw_config = config.map(|c| c.to_raw(self.library().version(), M::BLOCKING)).transpose()?;
        let config_ptr = raw_config.as_mut().map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
        let seq = self.next_child();
        let roster = match self.roster() {
            // Not inside a group (`create_child` refuses it), nor for a non-blocking one, which one thread may split
            // for several ranks in turn: meeting the others there would wait for itself.
            Some(roster) if M::BLOCKING && !crate::group::in_group() => roster.split(
                seq,
                u32::try_from(color).ok(),
                self.context().ordinal(),
                crate::placement::LINE_UP_TIMEOUT,
            )?,
            _ => None,
        };
        self.context().bind_to_thread()?;
        // SAFETY: our live, active communicator; the config (or null: inherit) outlives the call.
        let raw = self.create_child("ncclCommSplit", &mut raw_config, |out| unsafe {
            // SAFETY: our live, active communicator; the config (or null: inherit) outlives the call; `out` is
            // the heap slot `create_child` keeps valid until the parent reports completion.
            result::comm_split(self.library(), self.raw(), color, key, config_ptr, out)
        })?;
        self.child(raw, raw_config, roster)
    }

    /// A new communicator without the ranks in `exclude` (`ncclCommShrink`); called by every remaining
    /// rank with the same list. With `abort_outstanding`, operations still running on this communicator are
    /// aborted first (`NCCL_SHRINK_ABORT`), for shrinking away failed ranks. A blocking child knows its ranks in
    /// this process as [`split`](Communicator::split)'s children do: every rank of the parent's not excluded.
    pub fn shrink(
        &self,
        exclude: &[usize],
        config: Option<&Config>,
        abort_outstanding: bool,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        shrink(self, exclude, config, abort_outstanding)
    }

    /// The id new ranks use to join through [`grow`](Communicator::grow) (`ncclCommGetUniqueId`, NCCL 2.29+);
    /// called on the grow root only.
    pub fn grow_id(&self) -> Result<UniqueId, Error> {
        // SAFETY: our live, active communicator.
        let raw = unsafe { result::comm_get_unique_id(self.library(), self.raw()) }?;
        Ok(UniqueId::from_raw(&raw))
    }

    /// Grows the communicator to `nranks` ranks (`ncclCommGrow`, NCCL 2.29+), as an existing rank. The root
    /// passes the id from [`grow_id`](Communicator::grow_id), the other existing ranks `None`; new ranks call
    /// [`Communicator::join`] with the same id.
    pub fn grow(
        &self,
        nranks: usize,
        root_id: Option<&UniqueId>,
        config: Option<&Config>,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        if nranks <= self.nranks() {
            return Err(Error::invalid(
                "nranks",
                format!("growing needs more ranks than the current {}, got {nranks}", self.nranks()),
            ));
        }
        let nranks = i32::try_from(nranks).map_err(|_| Error::invalid("nranks", "does not fit in a C int"))?;
        let raw_id = root_id.map(|id| id.to_raw());
        let mut raw_config = config.map(|c| c.to_raw(self.library().version(), M::BLOCKING)).transpose()?;
        let config_ptr = raw_config.as_mut().map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
        self.context().bind_to_thread()?;
        let raw = self.create_child("ncclCommGrow", &mut raw_config, |out| unsafe {
            // SAFETY: our live, active communicator, the existing-rank role (rank -1), an id and a config that
            // outlive the call, and the slot `create_child` keeps valid until completion.
            result::comm_grow(self.library(), self.raw(), nranks, raw_id.as_ref(), -1, config_ptr, out)
        })?;
        new_communicator::<M>(
            self.library(),
            self.context(),
            raw,
            "ncclCommGrow",
            self.ranks_on_gpu(),
            raw_config,
            None,
        )
    }

    fn child(
        &self,
        raw: sys::ncclComm_t,
        config: Option<crate::config::RawConfig>,
        roster: Option<std::sync::Arc<crate::placement::Roster>>,
    ) -> Result<M::Wrap<Option<Communicator<Active, M>>>, Error> {
        let child = (!raw.is_null()).then(|| {
            Communicator::from_parts(raw, self.library(), self.context().clone(), None)
                .with_ranks_on_gpu_unchecked(self.ranks_on_gpu())
                .with_config(config)
                .in_roster(roster)
        });
        let child = if M::BLOCKING { pending_finish(child)? } else { child };
        if let Some(child) = &child {
            child.line_up_roster("a communicator split")?;
        }
        Ok(M::wrap(child, Progress::Done))
    }
}

fn pending_finish<T: super::pending::Resolve>(value: T) -> Result<T, Error> {
    value.finish()
}

/// How long a child-creating call on a non-blocking communicator may take before it is reported as stuck.
const CHILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

impl<S: Initialized, M: Mode> Communicator<S, M> {
    /// Runs a call that creates a child communicator (split, shrink, grow). NCCL writes the child's handle into
    /// the out-pointer when the operation completes, which on a non-blocking communicator is after the call
    /// returned, so the slot lives on the heap and the parent is polled until it reports completion (bounded by
    /// [`CHILD_TIMEOUT`]; on timeout the slot, and the config whose commName NCCL keeps, are leaked rather than
    /// freed under NCCL's feet).
    fn create_child(
        &self,
        call: &'static str,
        config: &mut Option<crate::config::RawConfig>,
        run: impl FnOnce(*mut sys::ncclComm_t) -> Result<Progress, Error>,
    ) -> Result<sys::ncclComm_t, Error> {
        // Inside a group NCCL would start the operation only at the group's end, which this thread cannot reach
        // while it polls the parent here.
        super::init::refuse_in_group(call, "call it outside the group")?;
        let mut slot: Box<sys::ncclComm_t> = Box::new(NULL);
        let progress = run(&mut *slot)?;
        // A non-blocking parent may report success for the call while the operation still runs (or has already
        // failed) in the background; only its asynchronous state tells, so poll it either way.
        if progress == Progress::InProgress || !M::BLOCKING {
            if let Err(error) = self.wait_parent(call, CHILD_TIMEOUT) {
                Box::leak(slot);
                std::mem::forget(config.take());
                return Err(error);
            }
        }
        Ok(*slot)
    }

    /// Polls this (parent) communicator until its outstanding operation completes or fails.
    fn wait_parent(&self, operation: &'static str, timeout: std::time::Duration) -> Result<(), Error> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // SAFETY: our live communicator.
            match unsafe { result::comm_get_async_error(self.library(), self.raw()) }? {
                Progress::Done => return Ok(()),
                Progress::InProgress if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_micros(100))
                }
                Progress::InProgress => return Err(Error::Timeout { operation, after: timeout }),
            }
        }
    }
}

/// Wraps a handle NCCL just created (shrink, grow, join), which must not be null, in `roster` (a shrunk child's).
fn new_communicator<M: Mode>(
    library: &'static sys::Library,
    context: &std::sync::Arc<cudarc::driver::CudaContext>,
    raw: sys::ncclComm_t,
    call: &'static str,
    ranks_on_gpu: usize,
    config: Option<crate::config::RawConfig>,
    roster: Option<std::sync::Arc<crate::placement::Roster>>,
) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
    if raw.is_null() {
        return Err(Error::Nccl {
            call,
            code: crate::error::ResultCode::InternalError,
            description: "returned success but no communicator".into(),
            last_error: result::last_error(library, NULL),
        });
    }
    let comm: Communicator<Active, M> = Communicator::from_parts(raw, library, context.clone(), None)
        .with_ranks_on_gpu_unchecked(ranks_on_gpu)
        .with_config(config)
        .in_roster(roster);
    let comm = if M::BLOCKING { pending_finish(comm)? } else { comm };
    comm.line_up_roster(call)?;
    Ok(M::wrap(comm, Progress::Done))
}

fn shrink<S: Initialized, M: Mode>(
    comm: &Communicator<S, M>,
    exclude: &[usize],
    config: Option<&Config>,
    abort_outstanding: bool,
) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
    let nranks = comm.nranks();
    let mut list = Vec::with_capacity(exclude.len());
    for (i, &rank) in exclude.iter().enumerate() {
        if rank >= nranks {
            return Err(Error::invalid("exclude", format!("rank {rank} is not below nranks {nranks}")));
        }
        if exclude[..i].contains(&rank) {
            return Err(Error::invalid("exclude", format!("rank {rank} is listed twice")));
        }
        list.push(rank as i32);
    }
    if list.len() >= nranks {
        return Err(Error::invalid("exclude", "excluding every rank leaves no communicator"));
    }
    if exclude.contains(&comm.rank()) {
        return Err(Error::invalid("exclude", "an excluded rank does not call shrink; only the remaining ranks do"));
    }
    let flags = if abort_outstanding { sys::NCCL_SHRINK_ABORT } else { sys::NCCL_SHRINK_DEFAULT } as i32;
    let seq = comm.next_child();
    let roster = comm.roster().filter(|_| M::BLOCKING).and_then(|roster| roster.shrink(seq, exclude));
    let mut raw_config = config.map(|c| c.to_raw(comm.library().version(), M::BLOCKING)).transpose()?;
    let config_ptr = raw_config.as_mut().map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
    comm.context().bind_to_thread()?;
    let raw = comm.create_child("ncclCommShrink", &mut raw_config, |out| unsafe {
        // SAFETY: a live communicator in a state NCCL allows shrinking from (active or revoked); the rank list
        // was validated, the config outlives the call, and `out` stays valid until completion.
        result::comm_shrink(comm.library(), comm.raw(), &list, config_ptr, flags, out)
    })?;
    new_communicator::<M>(
        comm.library(),
        comm.context(),
        raw,
        "ncclCommShrink",
        comm.ranks_on_gpu(),
        raw_config,
        roster,
    )
}

impl<M: Mode> Communicator<Suspended, M> {
    /// Reacquires what `suspend` released (`ncclCommResume`).
    pub fn resume(self) -> Transition<Suspended, Active, M> {
        // SAFETY: our live, suspended communicator; resume is allowed in this state.
        self.transition(|library, raw| unsafe { result::comm_resume(library, raw) })
    }
}

impl<M: Mode> Communicator<Revoked, M> {
    /// Shrinks a revoked communicator (the only way to keep working after a revoke); see
    /// [`Communicator::shrink`].
    pub fn shrink(
        &self,
        exclude: &[usize],
        config: Option<&Config>,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        shrink(self, exclude, config, false)
    }

    /// Frees a revoked communicator's local resources (`ncclCommDestroy`).
    pub fn destroy(self) -> Result<(), TransitionError<Self>> {
        destroy(self)
    }
}

impl<M: Mode> Communicator<Finalized, M> {
    /// Frees the communicator's local resources (`ncclCommDestroy`). Never waits for other ranks.
    pub fn destroy(self) -> Result<(), TransitionError<Self>> {
        destroy(self)
    }
}

fn destroy<S: Initialized, M: Mode>(comm: Communicator<S, M>) -> Result<(), TransitionError<Communicator<S, M>>> {
    // SAFETY: our live communicator in a state where NCCL allows destroy (finalized or revoked).
    match unsafe { result::comm_destroy(comm.library(), comm.raw()) } {
        Ok(_) => {
            let _ = comm.into_raw();
            Ok(())
        }
        Err(error) => Err(TransitionError::new(comm, error)),
    }
}

impl<M: Mode> Communicator<Uninit, M> {
    /// Joins a growing communicator as a new rank (`ncclCommGrow` with no parent): `rank` is the rank
    /// assigned to this process in the grown communicator of `nranks` ranks, `id` the root's
    /// [`grow_id`](Communicator::grow_id).
    pub fn join(
        self,
        nranks: usize,
        rank: usize,
        id: &UniqueId,
        config: &Config,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        if rank >= nranks {
            return Err(Error::invalid("rank", format!("rank {rank} is not below nranks {nranks}")));
        }
        let nranks = i32::try_from(nranks).map_err(|_| Error::invalid("nranks", "does not fit in a C int"))?;
        super::init::refuse_in_group("ncclCommGrow (join)", "join outside the group")?;
        let raw_id = id.to_raw();
        let ranks_on_gpu = self.settle_ranks_on_gpu()?;
        let mut raw_config = config.to_raw(self.library().version(), M::BLOCKING)?;
        self.context().bind_to_thread()?;
        // A joining rank has no parent to poll: NCCL hands out its new communicator at once, as for init. The
        // slot is on the heap all the same and is leaked if NCCL reports the operation in progress without a
        // handle to poll, since NCCL may still write it.
        let slot: *mut sys::ncclComm_t = Box::into_raw(Box::new(NULL));
        // SAFETY: the new-rank role (null parent, id, assigned rank); the context is current, the config
        // outlives the call, and `slot` is a live heap allocation.
        let outcome = unsafe {
            result::comm_grow(self.library(), NULL, nranks, Some(&raw_id), rank as i32, raw_config.as_mut_ptr(), slot)
        };
        // SAFETY: `slot` came from Box::into_raw above and NCCL has finished writing it unless it reported the
        // operation in progress with no handle yet, the one case in which it stays leaked.
        let raw = unsafe { *slot };
        if !(matches!(outcome, Ok(Progress::InProgress)) && raw.is_null()) {
            // SAFETY: as above; reclaimed exactly once.
            drop(unsafe { Box::from_raw(slot) });
        }
        let _progress = outcome?; // the new communicator's own Pending polls it
        new_communicator::<M>(self.library(), self.context(), raw, "ncclCommGrow", ranks_on_gpu, Some(raw_config), None)
    }
}
