//! The typestate communicator.
//!
//! A [`Communicator<S, M>`] is one rank's handle on an NCCL communicator. `S` is its lifecycle state (type
//! state) and `M` whether it was configured blocking or non-blocking:
//!
//! ```text
//! Communicator<Uninit> --init / initialize / init_all--> Communicator<Active>
//! Active --suspend(flags)--> Suspended --resume--> Active
//! Active --finalize--> Finalized --destroy--> ()         Active/Suspended/Finalized/Revoked --abort--> ()
//! Active --revoke--> Revoked (only destroy, abort, shrink)  Active --split/shrink/grow--> new Communicator<Active>
//! ```
//!
//! Each method exists only in the states where NCCL allows the call, so reading `rank` on an uninitialised
//! communicator, a collective on a suspended one, or finalizing while a window is registered are compile
//! errors. Transitions consume the communicator; a failed transition hands it back inside
//! [`TransitionError`] so the caller can still abort it.
//!
//! With a non-blocking configuration ([`NonBlocking`]), every transition returns a [`Pending`] whose value
//! is reachable only by polling it to completion.
//!
//! Dropping a live communicator never panics and never waits for other ranks: it aborts (a finalized one is
//! destroyed) and logs what it did.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::error::Error;
use crate::result;
use crate::sys::{ncclComm_t, Library};

mod adopt;
mod init;
mod lifecycle;
mod pending;
mod status;

pub use adopt::Adopted;
pub use init::UniqueId;
pub use lifecycle::SuspendFlags;
pub(crate) use pending::Resolve;
pub use pending::{Pending, Polled};
pub use status::MemStat;

mod sealed {
    pub trait State {}
    pub trait Mode {}
}

/// A lifecycle state of a [`Communicator`] (type state).
pub trait State: sealed::State + 'static {
    /// The state's name, for messages.
    const NAME: &'static str;
}

/// States in which the communicator is initialised: it has a rank, a size and a device.
pub trait Initialized: State {}

/// States from which [`Communicator::abort`] is allowed (every initialised state).
pub trait Abortable: Initialized {}

macro_rules! state {
    ($(#[$doc:meta])* $name:ident $(: $($extra:ident),*)?) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl sealed::State for $name {}
        impl State for $name {
            const NAME: &'static str = stringify!($name);
        }
        $($(impl $extra for $name {})*)?
    };
}

state!(
    /// Not initialised yet (type state): nccl4py's null communicator. Only initialisation is possible.
    Uninit
);
state!(
    /// Initialised and usable (type state): collectives, resources, device communicators, transitions.
    Active: Initialized, Abortable
);
state!(
    /// Suspended (type state): its suspendable memory is released; only `resume`, `abort` and queries.
    Suspended: Initialized, Abortable
);
state!(
    /// Finalized (type state): outstanding work is flushed; only `destroy`, `abort` and queries.
    Finalized: Initialized, Abortable
);
state!(
    /// Revoked (type state): outstanding work was stopped; only `shrink`, `destroy` and `abort`.
    Revoked: Initialized, Abortable
);

/// Whether the communicator's calls block until done or may return "in progress" (type state).
pub trait Mode: sealed::Mode + 'static {
    /// What a transition yields: the value itself, or a [`Pending`] that must be polled to get it.
    type Wrap<T: pending::Resolve>;
    /// The `blocking` value of `ncclConfig_t`.
    const BLOCKING: bool;
    #[doc(hidden)]
    fn wrap<T: pending::Resolve>(value: T, progress: result::Progress) -> Self::Wrap<T>;
}

/// Calls block until NCCL is done (the default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Blocking;
/// Calls may return while NCCL continues in the background; transitions yield [`Pending`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NonBlocking;

impl sealed::Mode for Blocking {}
impl sealed::Mode for NonBlocking {}

impl Mode for Blocking {
    type Wrap<T: pending::Resolve> = T;
    const BLOCKING: bool = true;
    fn wrap<T: pending::Resolve>(value: T, _progress: result::Progress) -> T {
        // A blocking communicator never reports InProgress; if NCCL did, the value is still complete,
        // because blocking calls return only after the operation finished.
        value
    }
}

impl Mode for NonBlocking {
    type Wrap<T: pending::Resolve> = Pending<T>;
    const BLOCKING: bool = false;
    fn wrap<T: pending::Resolve>(value: T, _progress: result::Progress) -> Pending<T> {
        // Even a call that returned ncclSuccess is polled once more through ncclCommGetAsyncError, which
        // then answers at once: one code path, and asynchronous errors are never missed.
        Pending::new(value)
    }
}

/// What an initialised communicator knows about itself, read once when initialisation completes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Identity {
    pub(crate) rank: i32,
    pub(crate) nranks: i32,
    pub(crate) cuda_device: i32,
}

/// One rank's NCCL communicator in state `S` (type state) and mode `M`. See the [module docs](self).
pub struct Communicator<S: State = Active, M: Mode = Blocking> {
    raw: ncclComm_t,
    library: &'static Library,
    context: Arc<CudaContext>,
    identity: Option<Identity>,
    /// Ranks of this communicator on this rank's GPU, this one included (see [`Communicator::ranks_on_gpu`]);
    /// 0 until initialisation settles it, if nobody said.
    ranks_on_gpu: usize,
    /// The ranks of this communicator that share its GPU in this process, lined up after setup calls.
    local_group: Option<Arc<crate::placement::LocalGroup>>,
    /// Its ranks in this process, where weft knows them (`spmd`, `sharing_gpu_in`, and the communicators split or
    /// shrunk from such a one): the ground of its children's line-up groups and launch gates.
    roster: Option<Arc<crate::placement::Roster>>,
    /// Whether the roster's ranks line up before each launch: NCCL launches them in lock step
    /// (`NCCL_LAUNCH_MODE=GROUP`, [`Roster::gates_launches`](crate::placement::Roster::gates_launches)), so that one
    /// that never comes is an error, not a hang inside NCCL.
    gates_launches: bool,
    /// How many communicators were split or shrunk from this one: the rosters of the children tell them apart by it.
    children_made: std::cell::Cell<u64>,
    resources: crate::resources::RegistryCell,
    /// The NCCL group a non-blocking initialisation was queued in: NCCL starts it only when that group ends.
    init_group: Option<Arc<crate::group::GroupOutcome>>,
    /// The config the communicator was created with: NCCL keeps `commName` as a pointer into it and reads it
    /// during initialisation (which may run after the creating call returned), so it lives as long as the handle.
    config: Option<crate::config::RawConfig>,
    state: PhantomData<(S, M)>,
}

// SAFETY: an NCCL communicator may be used from any thread, one thread at a time; `Communicator` is not
// `Sync`, so shared references never cross threads and every call through it is serialized by the borrow.
unsafe impl<S: State, M: Mode> Send for Communicator<S, M> {}

impl<S: State, M: Mode> Communicator<S, M> {
    /// Wraps a raw handle. `identity` is `None` for `Uninit` and until a non-blocking initialisation completes.
    pub(crate) fn from_parts(
        raw: ncclComm_t,
        library: &'static Library,
        context: Arc<CudaContext>,
        identity: Option<Identity>,
    ) -> Self {
        Communicator {
            raw,
            library,
            context,
            identity,
            ranks_on_gpu: 0,
            local_group: None,
            roster: None,
            gates_launches: false,
            children_made: std::cell::Cell::new(0),
            resources: Default::default(),
            init_group: None,
            config: None,
            state: PhantomData,
        }
    }

    /// The same communicator, recorded as sharing its GPU with `ranks - 1` other ranks of it.
    pub(crate) fn with_ranks_on_gpu_unchecked(mut self, ranks: usize) -> Self {
        self.ranks_on_gpu = ranks.max(1);
        self
    }

    /// Moves the handle into another state; `self`'s `Drop` does not run.
    pub(crate) fn into_state<T: State>(mut self) -> Communicator<T, M> {
        let raw = std::mem::replace(&mut self.raw, NULL);
        Communicator {
            raw,
            library: self.library,
            context: self.context.clone(),
            identity: self.identity,
            ranks_on_gpu: self.ranks_on_gpu,
            local_group: self.local_group.take(),
            roster: self.roster.take(),
            gates_launches: self.gates_launches,
            children_made: self.children_made.clone(),
            resources: std::mem::take(&mut self.resources),
            init_group: self.init_group.take(),
            config: self.config.take(),
            state: PhantomData,
        }
    }

    /// Gives up ownership of the raw handle (the caller becomes responsible for it).
    pub(crate) fn into_raw(mut self) -> ncclComm_t {
        std::mem::replace(&mut self.raw, NULL)
    }

    pub(crate) fn set_identity(&mut self, identity: Identity) {
        self.identity = Some(identity);
    }

    pub(crate) fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    pub(crate) fn library(&self) -> &'static Library {
        self.library
    }

    pub(crate) fn raw(&self) -> ncclComm_t {
        self.raw
    }

    pub(crate) fn registry(&self) -> &crate::resources::RegistryCell {
        &self.resources
    }

    /// The (primary) CUDA context of this rank's device, for streams and buffers.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The libnccl this communicator was made with.
    pub fn nccl_version(&self) -> crate::Version {
        self.library.version()
    }

    /// How many ranks of this communicator run on this rank's GPU, this one included: 1 unless several ranks
    /// share the GPU (NCCL ≥ 2.30, `NCCL_MULTI_RANK_GPU_ENABLE=1`).
    ///
    /// Ranks that share a GPU share its multiprocessors, so a kernel whose blocks wait for a peer's blocks
    /// must leave room for them: [`Communicator::one_wave`] gives each rank its part of the GPU, and a launch
    /// of a kernel taking a device communicator is refused when its blocks could not all be resident next to
    /// its peers' (docs/multi-rank.md). Known from the placement: [`spmd`](crate::spmd()) and
    /// [`Communicator::init_all`] count the ranks per device; a communicator initialised on its own takes
    /// [`Communicator::sharing_gpu`]'s value, else `WEFT_RANKS_PER_GPU` (for one process per rank), else 1.
    /// Communicators split, shrunk or grown from it inherit the count (an upper bound for them).
    pub fn ranks_on_gpu(&self) -> usize {
        self.ranks_on_gpu.max(1)
    }

    /// The count given before initialisation, if any (0: none).
    pub(crate) fn ranks_on_gpu_given(&self) -> usize {
        self.ranks_on_gpu
    }

    pub(crate) fn with_local_group(mut self, group: Option<Arc<crate::placement::LocalGroup>>) -> Self {
        self.local_group = group;
        self
    }

    pub(crate) fn local_group(&self) -> Option<&Arc<crate::placement::LocalGroup>> {
        self.local_group.as_ref()
    }

    /// The same communicator, its ranks in this process being `roster`'s (see the field), their gate its launch gate
    /// where NCCL launches them in lock step.
    pub(crate) fn with_roster(mut self, roster: Option<Arc<crate::placement::Roster>>) -> Self {
        self.gates_launches = roster.as_ref().is_some_and(|roster| roster.gates_launches());
        self.roster = roster;
        self
    }

    pub(crate) fn roster(&self) -> Option<&Arc<crate::placement::Roster>> {
        self.roster.as_ref()
    }

    /// The same communicator (a child just split or shrunk from a parent with a roster) in `roster`, derived from
    /// its parent's: the line-up group of its ranks on this GPU and, under `NCCL_LAUNCH_MODE=GROUP`, its launch gate.
    pub(crate) fn in_roster(self, roster: Option<Arc<crate::placement::Roster>>) -> Self {
        let group = roster.as_ref().and_then(|roster| roster.group_on(self.context.ordinal()));
        self.with_roster(roster).with_local_group(group)
    }

    /// The number of the next communicator split or shrunk from this one (every rank counts the same: both calls are
    /// collective).
    pub(crate) fn next_child(&self) -> u64 {
        let seq = self.children_made.get();
        self.children_made.set(seq + 1);
        seq
    }

    /// Leaves its roster's gate (the launch gate) for good (`how`: "aborted its communicator"): an aborted, revoked
    /// or finalized communicator launches nothing more and makes no child, so its peers must not wait for it there
    /// ([`LocalGroup::leave`](crate::placement::LocalGroup::leave)).
    pub(crate) fn leave_launch_gate(&self, how: &'static str) {
        if let (Some(roster), Some(identity)) = (&self.roster, self.identity) {
            roster.gate().leave(identity.rank as usize, how);
        }
    }

    /// Before an NCCL call that launches work (a collective, a point-to-point or one-sided operation): where NCCL
    /// launches this process's ranks in lock step (`NCCL_LAUNCH_MODE=GROUP`), waits until every rank of the gate has
    /// come to its own launch. NCCL's launch waits for them too, but without a timeout and deaf to aborts, so a rank
    /// that never comes (its body failed, it skipped the operation) would keep its peers inside NCCL for good; here
    /// that is [`Error::PeerFailed`] as soon as an [`spmd`](crate::spmd()) peer failed or a rank left the gate, else [`Error::Stalled`] after
    /// [`LINE_UP_TIMEOUT`](crate::placement::LINE_UP_TIMEOUT). Nothing to do without a gate or inside an NCCL group
    /// (the call only queues; the group's end launches, and is not gated: docs/multi-rank.md, "Launch mode").
    pub(crate) fn line_up_launch(&self, operation: &'static str) -> Result<(), Error> {
        match &self.roster {
            Some(roster) if self.gates_launches && !crate::group::in_group() => {
                roster.gate().meet(operation, crate::placement::LINE_UP_TIMEOUT)
            }
            _ => Ok(()),
        }
    }

    /// The same communicator, waiting for the NCCL group open on this thread (if any) before it is initialised.
    pub(crate) fn with_init_group(mut self) -> Self {
        self.init_group = crate::group::current();
        self
    }

    /// The same communicator, keeping the config it was created with (see the field).
    pub(crate) fn with_config(mut self, config: Option<crate::config::RawConfig>) -> Self {
        self.config = config;
        self
    }

    pub(crate) fn init_group(&self) -> Option<&Arc<crate::group::GroupOutcome>> {
        self.init_group.as_ref()
    }

    /// After a collective setup call: waits until every rank of this communicator that shares the GPU in this
    /// process has returned from it too ([`crate::placement::LocalGroup`]). Nothing to do without such ranks, on a
    /// non-blocking communicator, or inside an NCCL group (the call only queued; the group's end completes it).
    pub(crate) fn line_up(&self, after: &'static str) -> Result<(), Error> {
        match &self.local_group {
            Some(group) if M::BLOCKING && !crate::group::in_group() => {
                group.line_up(after, crate::placement::LINE_UP_TIMEOUT)
            }
            _ => Ok(()),
        }
    }

    /// After the collective call that made this communicator (a split or shrink, `after`): waits until every rank of
    /// its roster has it, so that all of them have enrolled and none goes on before its peers got through the call
    /// (as [`line_up`](Self::line_up) does for a GPU's ranks after setup calls).
    pub(crate) fn line_up_roster(&self, after: &'static str) -> Result<(), Error> {
        match &self.roster {
            Some(roster) if M::BLOCKING && !crate::group::in_group() => {
                roster.gate().line_up(after, crate::placement::LINE_UP_TIMEOUT)
            }
            _ => Ok(()),
        }
    }

    /// Runs `load` — the first use of code that CUDA loads onto the GPU lazily: a kernel's `function` or
    /// `one_wave`, a first cuBLAS call of a shape — while no rank sharing this GPU communicates. Every rank of this
    /// communicator on this GPU calls it at the same point, each with its own work settled; they line up before
    /// `load` and again after it.
    ///
    /// Why: loading a module waits for the whole CUDA context, inside the driver, holding a lock that launches
    /// need. Where ranks share a GPU (and its context), a rank loading code while a peer's collective or barrier
    /// kernel waits for a third rank, which now cannot launch its half, hangs all of them (seen at 4 ranks with a
    /// GEMM kernel loaded at its first launch, docs/multi-rank.md "Loading code"). With one rank per GPU it just
    /// runs `load`. A peer that never arrives ends the wait with `Error::Stalled` (or `Error::PeerFailed`).
    pub fn with_gpu_peers_idle<R>(&self, load: impl FnOnce() -> Result<R, Error>) -> Result<R, Error> {
        self.line_up_gpu_peers("with_gpu_peers_idle (before loading)")?;
        let loaded = crate::cuda::loading_together(load);
        // The peers wait for this rank's load even when it failed: its error is returned after the line-up.
        self.line_up_gpu_peers("with_gpu_peers_idle (after loading)")?;
        loaded
    }

    /// Waits (on the host) until every rank of this communicator that shares this GPU in this process has reached
    /// the same point; `after` names the point in the error of a peer that never arrives (`Error::Stalled` after
    /// `placement::LINE_UP_TIMEOUT`, or `Error::PeerFailed`). With one rank per GPU it returns at once.
    ///
    /// Use: before enqueuing a stream wait on a flag that a peer's kernel raises, directly or through a barrier
    /// ([`DeviceBuffer::stream_wait_at_least`](crate::DeviceBuffer::stream_wait_at_least)), once this rank has
    /// enqueued its own half — so that every peer has enqueued its half too. CUDA does not see the order such a
    /// wait sets up, and may queue a peer's later work behind it on the GPU: the peer's producer would then wait
    /// for the very wait it was to release (docs/multi-rank.md, "Stream waits on flags that peers raise").
    pub fn line_up_gpu_peers(&self, after: &'static str) -> Result<(), Error> {
        match &self.local_group {
            Some(group) => group.line_up(after, crate::placement::LINE_UP_TIMEOUT),
            None => Ok(()),
        }
    }
}

impl<S: Initialized, M: Mode> Communicator<S, M> {
    fn identity(&self) -> Identity {
        // Every way to reach an initialised state fills the identity first (blocking constructors directly,
        // non-blocking ones in `Resolve::finish` before `Pending` releases the value).
        self.identity.unwrap_or(Identity { rank: -1, nranks: 0, cuda_device: -1 })
    }

    /// The raw `ncclComm_t`.
    ///
    /// # Safety
    /// The handle stays owned by this `Communicator`: do not finalize, destroy, abort, revoke, suspend or
    /// resume it behind weft's back, and do not use it after this `Communicator` is gone.
    pub unsafe fn as_raw(&self) -> ncclComm_t {
        self.raw
    }

    /// The number of ranks.
    pub fn nranks(&self) -> usize {
        self.identity().nranks as usize
    }

    /// This rank, in `0..nranks()`.
    pub fn rank(&self) -> usize {
        self.identity().rank as usize
    }

    /// The CUDA device ordinal this rank runs on.
    pub fn cuda_device(&self) -> usize {
        self.identity().cuda_device as usize
    }

    /// Aborts the communicator: stops outstanding operations and frees it without waiting for other ranks.
    ///
    /// [`Error::Stalled`] if NCCL's abort has not returned within [`ABORT_DEADLINE`]: it waits for the
    /// communicator's last kernels, and kernels that never end (NCCL 2.30's symmetric kernels do not read the abort
    /// flag) would hold it for good. It then goes on on a thread of its own, which ends with the process.
    pub fn abort(self) -> Result<(), Error> {
        self.abort_within(ABORT_DEADLINE)
    }

    /// [`abort`](Self::abort), waiting at most `deadline` for NCCL's abort ([`Error::Stalled`] past it, the abort
    /// going on on a thread of its own).
    pub fn abort_within(mut self, deadline: std::time::Duration) -> Result<(), Error> {
        self.leave_launch_gate("aborted its communicator");
        let (library, config) = (self.library, self.config.take());
        let raw = self.into_raw();
        // SAFETY: `raw` is a live communicator owned by us until now; abort is allowed in every initialised
        // state, and nothing can use the handle afterwards because `self` is consumed.
        match unsafe { abort_on_own_thread(library, raw, config, deadline) } {
            Some(outcome) => outcome,
            None => Err(Error::Stalled {
                operation: "ncclCommAbort, left running on a thread of its own (its communicator's kernels may be \
                            stuck on the device),",
                after: deadline,
            }),
        }
    }
}

/// How long a communicator's abort ([`Communicator::abort`], or a drop of a live communicator) waits for
/// `ncclCommAbort` before leaving it to a thread of its own. NCCL's abort synchronizes the communicator's internal
/// stream, so it waits for its last kernels, and NCCL 2.30's symmetric kernels never read the abort flag: by NCCL's
/// source a stuck one would hold the abort for good. Run on an H100 (2026-12-06), the abort behind a stuck symmetric
/// all-reduce returned in 0.51 s, but a bound costs nothing where NCCL does end it (docs/multi-rank.md, "What NCCL
/// 2.30's multi-rank mode could not do").
pub const ABORT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `ncclCommAbort(raw)` on a thread of its own and waits for it at most `deadline`: its outcome, or `None` if it
/// was still running then (it goes on there, and ends with the process at the latest). `config` (the communicator's
/// NCCL config, whose strings NCCL may still read) goes with it. Aborts on this thread, without a deadline, inside
/// an NCCL group open on this thread (NCCL's groups are per thread: an abort there joins the group, and what the
/// group queued for the communicator, its initialisation say, must not outlive it), or where no thread can be
/// started.
///
/// # Safety
/// `raw` is a live communicator of `library` that nothing uses after this call.
unsafe fn abort_on_own_thread(
    library: &'static Library,
    raw: ncclComm_t,
    config: Option<crate::config::RawConfig>,
    deadline: std::time::Duration,
) -> Option<Result<(), Error>> {
    struct Owned {
        comm: ncclComm_t,
        config: Option<crate::config::RawConfig>,
    }
    // SAFETY: NCCL allows an abort from any thread; the handle and its config move to the aborting thread, and
    // nothing else uses either afterwards (the caller's contract).
    unsafe impl Send for Owned {}
    impl Owned {
        /// Aborts the communicator, then drops its config (which outlives the abort).
        fn abort(self, library: &'static Library) -> Result<(), Error> {
            // SAFETY: the caller's contract of `abort_on_own_thread`.
            let outcome = unsafe { result::comm_abort(library, self.comm) }.map(|_| ());
            drop(self.config);
            outcome
        }
    }
    let owned = Owned { comm: raw, config };
    if crate::group::current().is_some() {
        return Some(owned.abort(library));
    }
    // The handle waits in a slot that the aborting thread empties; where no thread starts, it is still there, with
    // its config, to abort here.
    let slot = Arc::new(std::sync::Mutex::new(Some(owned)));
    let take =
        |slot: &std::sync::Mutex<Option<Owned>>| slot.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let (sender, receiver) = std::sync::mpsc::channel();
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new().name("weft-abort".to_owned()).spawn(move || {
        if let Some(owned) = take(&theirs) {
            // The receiver may be gone (the deadline passed): nobody waits for the outcome then.
            let _ = sender.send(owned.abort(library));
        }
    });
    match spawned {
        // A disconnected channel would mean the thread ended without an outcome, which `Owned::abort` cannot.
        Ok(_) => receiver.recv_timeout(deadline).ok(),
        Err(_) => take(&slot).map(|owned| owned.abort(library)),
    }
}

impl<S: State, M: Mode> Drop for Communicator<S, M> {
    fn drop(&mut self) {
        if self.raw.is_null() {
            return;
        }
        let finalized = std::any::TypeId::of::<S>() == std::any::TypeId::of::<Finalized>();
        let (what, outcome) = if finalized {
            // SAFETY: a finalized communicator owned by us; destroy after finalize is local.
            ("destroyed", Some(unsafe { result::comm_destroy(self.library, self.raw) }.map(|_| ())))
        } else {
            self.leave_launch_gate("dropped its live communicator");
            // SAFETY: a live communicator owned by us, never used again (its handle is cleared below); abort never
            // waits for other ranks, but it waits for the communicator's kernels, so within a deadline.
            ("aborted", unsafe { abort_on_own_thread(self.library, self.raw, self.config.take(), ABORT_DEADLINE) })
        };
        self.raw = std::ptr::null_mut();
        match outcome {
            Some(Ok(())) if finalized => tracing::debug!("dropped a finalized NCCL communicator: destroyed"),
            Some(Ok(())) => tracing::warn!(
                state = S::NAME,
                "dropped a live NCCL communicator: {what} it (call finalize + destroy for an orderly shutdown)"
            ),
            Some(Err(error)) => tracing::error!(state = S::NAME, %error, "dropping an NCCL communicator failed"),
            None => tracing::error!(
                state = S::NAME,
                "dropped a live NCCL communicator whose abort had not returned after {ABORT_DEADLINE:?}: its kernels \
                 may be stuck on the device (docs/multi-rank.md); the abort goes on on a thread of its own"
            ),
        }
    }
}

impl<S: State, M: Mode> fmt::Debug for Communicator<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("Communicator");
        out.field("state", &S::NAME).field("blocking", &M::BLOCKING);
        if let Some(identity) = self.identity {
            out.field("rank", &identity.rank)
                .field("nranks", &identity.nranks)
                .field("cuda_device", &identity.cuda_device);
        }
        out.finish()
    }
}

/// A transition that failed; the communicator comes back in its previous state so it can still be used or
/// aborted (dropping it aborts it).
pub struct TransitionError<C> {
    // Boxed: a communicator and an error together are large, and this travels in every transition's `Err`.
    inner: Box<(C, Error)>,
}

impl<C> TransitionError<C> {
    pub(crate) fn new(communicator: C, error: Error) -> Self {
        TransitionError { inner: Box::new((communicator, error)) }
    }

    /// Why the transition failed.
    pub fn error(&self) -> &Error {
        &self.inner.1
    }

    /// The communicator, unchanged by the failed transition.
    pub fn communicator(&self) -> &C {
        &self.inner.0
    }

    /// Takes the communicator back (to retry, keep using it, or abort it).
    pub fn into_communicator(self) -> C {
        self.inner.0
    }

    /// Both parts.
    pub fn into_parts(self) -> (C, Error) {
        let (communicator, error) = *self.inner;
        (communicator, error)
    }

    /// Discards the communicator (dropping it aborts it) and keeps the error.
    pub fn into_error(self) -> Error {
        self.inner.1
    }
}

impl<C> fmt::Debug for TransitionError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError").field("error", self.error()).finish_non_exhaustive()
    }
}

impl<C> fmt::Display for TransitionError<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.error(), f)
    }
}

impl<C> std::error::Error for TransitionError<C> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error())
    }
}

impl<C> From<TransitionError<C>> for Error {
    fn from(failure: TransitionError<C>) -> Error {
        failure.into_error()
    }
}

/// Reads rank, size and device of a freshly initialised handle.
pub(crate) fn read_identity(library: &'static Library, raw: ncclComm_t) -> Result<Identity, Error> {
    // SAFETY: `raw` was just initialised by NCCL and is owned by the caller (likewise below).
    let rank = unsafe { result::comm_user_rank(library, raw) }?;
    // SAFETY: as above.
    let nranks = unsafe { result::comm_count(library, raw) }?;
    // SAFETY: as above.
    let cuda_device = unsafe { result::comm_cu_device(library, raw) }?;
    Ok(Identity { rank, nranks, cuda_device })
}

/// The null communicator handle (for `Uninit`, and split results without a color).
pub(crate) const NULL: ncclComm_t = std::ptr::null_mut();
