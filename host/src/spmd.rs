//! Single-process SPMD: one thread per rank, each with its own active communicator, over a device list that may
//! repeat a device (several ranks on one GPU).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::comm::UniqueId;
use crate::comm::{Active, Communicator};
use crate::config::Config;
use crate::error::Error;
use crate::placement::{shared_gpu_config, Placement};

/// Runs `body` on one thread per listed device, each with rank `i` of a fresh blocking communicator on
/// `devices[i]`, and returns the results in rank order.
///
/// A device listed several times runs several ranks ([`Placement`] builds such lists; `Placement::from_env()`
/// reads `WEFT_RANKS`). That needs NCCL ≥ 2.30 and `NCCL_MULTI_RANK_GPU_ENABLE=1`, checked before any rank starts
/// ([`Error::GpuSharing`] otherwise), and CUDA's 32 hardware queues per context ([`Error::TooFewQueues`] when
/// `CUDA_DEVICE_MAX_CONNECTIONS` is unset or asks for fewer: start the process with it set to 32); each rank's communicator then knows how many ranks share its GPU
/// ([`Communicator::ranks_on_gpu`]), and NCCL's CTAs per kernel are capped as [`shared_gpu_config`] says unless
/// `config` sets them.
///
/// Under `NCCL_LAUNCH_MODE=GROUP` (what ranks sharing a GPU need: docs/multi-rank.md, "Launch mode") NCCL launches
/// every rank of the process in lock step and waits for all of them inside each launch, without a timeout; so the
/// ranks also meet before each launch of a collective, point-to-point or one-sided operation outside an NCCL group,
/// and a rank that never comes ends the others' launches with [`Error::PeerFailed`] (its body failed, or its
/// communicator was aborted, revoked or finalized) or [`Error::Stalled`] (after
/// [`LINE_UP_TIMEOUT`](crate::placement::LINE_UP_TIMEOUT)).
///
/// The communicator is finalized and destroyed after `body` returns (aborted if `body` failed, so a rank
/// that errors never leaves the others waiting in finalize forever). A panic in one rank's body is turned
/// into an error for that rank after aborting its communicator.
pub fn spmd<R: Send>(
    devices: &[usize],
    config: &Config,
    body: impl Fn(&Communicator<Active>) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let placement = Placement::new(devices.to_vec())?;
    let library = crate::sys::library()?;
    placement.check_supported(library.version())?;
    placement.check_queues()?;
    for &device in devices {
        // Every context exists before any rank starts (docs/multi-rank.md: the first stream of a context waits for
        // the whole device, harmless only while nothing runs).
        crate::cuda::context(device)?;
    }
    let id = UniqueId::new()?;
    let nranks = devices.len();
    // Who the ranks are: where NCCL launches the ranks of this process in lock step (NCCL_LAUNCH_MODE=GROUP, read once
    // NCCL has read its nccl.conf files), all of them meet before each launch (`Communicator::line_up_launch`), and
    // the communicators split or shrunk from this one get their own groups and gates from it.
    let roster = (nranks > 1).then(|| Arc::new(crate::placement::Roster::new(devices.to_vec())));
    // The ranks (threads) sharing a GPU line up after each collective setup call.
    let groups = placement.local_groups();
    let job = Arc::new(Job { in_body: Mutex::new(nranks), ..Job::default() });
    let outcomes: Vec<Result<R, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &device)| {
                let (body, placement, group, roster) = (&body, &placement, &groups[rank], &roster);
                let job = &job;
                scope.spawn(move || -> Result<R, Error> {
                    let _member = Member::join(job, rank);
                    let outcome = (|| {
                        let in_body = InBody::new(job);
                        let config = shared_gpu_config(config, placement.ranks_on_gpu(rank));
                        let comm = Communicator::uninit(device)?
                            .sharing_gpu_in(group)?
                            .with_roster(roster.clone())
                            .init(nranks, rank, &id, &config)?;
                        match body(&comm) {
                            Ok(value) => {
                                in_body.leave();
                                let finalized = comm.finalize()?;
                                finalized.destroy()?;
                                Ok(value)
                            }
                            Err(error) => {
                                // The peers' host-side waits end first (`peer_failure`); this rank's resources go
                                // once they have left their bodies too, or after a grace period: ranks sharing a
                                // GPU share its context, and an abort frees memory that a peer's kernel may still
                                // be reading (an illegal address for every rank of the process).
                                job.fail(rank, &error);
                                in_body.leave();
                                job.wait_for_bodies(ABORT_GRACE);
                                let _ = comm.abort();
                                Err(error)
                            }
                        }
                    })();
                    if let Err(error) = &outcome {
                        job.fail(rank, error);
                    }
                    outcome
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| {
                handle.join().unwrap_or_else(|_| {
                    Err(Error::invalid("body", format!("rank {rank} panicked; its communicator was aborted")))
                })
            })
            .collect()
    });
    // The first failure is the cause: ranks that only stopped waiting for it report `PeerFailed`.
    let (mut values, mut cause, mut peer_failed) = (Vec::with_capacity(nranks), None, None);
    for outcome in outcomes {
        match outcome {
            Ok(value) => values.push(value),
            Err(error @ Error::PeerFailed { .. }) => {
                peer_failed.get_or_insert(error);
            }
            Err(error) => {
                cause.get_or_insert(error);
            }
        }
    }
    match cause.or(peer_failed) {
        Some(error) => Err(error),
        None => Ok(values),
    }
}

/// How long a failed rank waits for its peers to leave their bodies before it aborts its communicator anyway.
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// What the ranks of one [`spmd`] job share: the first rank that failed, if any, and how many ranks are still
/// running their bodies.
#[derive(Default)]
struct Job {
    failed: OnceLock<(usize, String)>,
    in_body: Mutex<usize>,
    left: Condvar,
}

impl Job {
    /// Records `rank`'s failure unless an earlier one is recorded (the message is formatted only then).
    fn fail(&self, rank: usize, error: &Error) {
        if !matches!(error, Error::PeerFailed { .. }) {
            self.failed.get_or_init(|| (rank, error.to_string()));
        }
    }

    fn leave_body(&self) {
        let mut in_body = self.in_body.lock().unwrap_or_else(|p| p.into_inner());
        *in_body = in_body.saturating_sub(1);
        self.left.notify_all();
    }

    fn wait_for_bodies(&self, grace: std::time::Duration) {
        let in_body = self.in_body.lock().unwrap_or_else(|p| p.into_inner());
        let _ = self.left.wait_timeout_while(in_body, grace, |n| *n > 0);
    }
}

/// A rank's presence in its body: it leaves once, explicitly or when dropped (an early return, a panic).
struct InBody<'a> {
    job: &'a Job,
    left: std::cell::Cell<bool>,
}

impl<'a> InBody<'a> {
    fn new(job: &'a Job) -> Self {
        InBody { job, left: false.into() }
    }

    fn leave(&self) {
        if !self.left.replace(true) {
            self.job.leave_body();
        }
    }
}

impl Drop for InBody<'_> {
    fn drop(&mut self) {
        self.leave();
    }
}

thread_local! {
    /// The job a rank thread belongs to, and its rank.
    static MEMBER: RefCell<Option<(Arc<Job>, usize)>> = const { RefCell::new(None) };
}

/// A rank thread's membership of its job, for its life; a panic in the thread counts as its failure.
struct Member {
    job: Arc<Job>,
    rank: usize,
}

impl Member {
    fn join(job: &Arc<Job>, rank: usize) -> Member {
        MEMBER.with(|m| *m.borrow_mut() = Some((job.clone(), rank)));
        Member { job: job.clone(), rank }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.job.failed.set((self.rank, "it panicked".into()));
        }
        MEMBER.with(|m| *m.borrow_mut() = None);
    }
}

/// `Err(PeerFailed)` when the calling thread is a rank of an [`spmd`] job in which another rank has failed: the
/// host-side waits (`cuda::settle` and friends) poll it, so a rank waiting for a peer that is gone stops waiting.
pub(crate) fn peer_failure() -> Result<(), Error> {
    MEMBER.with(|m| match &*m.borrow() {
        Some((job, me)) => match job.failed.get() {
            Some((rank, error)) if rank != me => Err(Error::PeerFailed { rank: *rank, error: error.clone() }),
            _ => Ok(()),
        },
        None => Ok(()),
    })
}

/// The CUDA devices visible to this process: `0..count`.
pub fn local_devices() -> Result<Vec<usize>, Error> {
    Ok((0..crate::cuda::device_count()?).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_failed_peer_ends_a_line_up_at_once_and_names_itself() {
        let job = Arc::new(Job { in_body: Mutex::new(2), ..Job::default() });
        let group = crate::placement::LocalGroup::new(2);
        let outcome = std::thread::scope(|scope| {
            let waiting = scope.spawn(|| {
                let _member = Member::join(&job, 0);
                let started = Instant::now();
                let outcome = group.line_up("a test round", Duration::from_secs(60));
                (outcome, started.elapsed())
            });
            // Rank 1 fails instead of lining up.
            std::thread::sleep(Duration::from_millis(50));
            job.fail(1, &Error::invalid("body", "rank 1 fails on purpose"));
            waiting.join().unwrap()
        });
        let (outcome, waited) = outcome;
        assert!(
            matches!(&outcome, Err(Error::PeerFailed { rank: 1, error }) if error.contains("on purpose")),
            "{outcome:?}"
        );
        assert!(waited < Duration::from_secs(5), "the line-up waited {waited:?}");
        // Outside a job nothing changes.
        assert!(peer_failure().is_ok());
    }

    #[test]
    fn a_rank_never_sees_its_own_failure_and_a_peer_failed_error_is_no_cause() {
        let job = Arc::new(Job { in_body: Mutex::new(2), ..Job::default() });
        let _member = Member::join(&job, 1);
        job.fail(0, &Error::PeerFailed { rank: 5, error: "elsewhere".into() });
        assert!(peer_failure().is_ok(), "a PeerFailed is an effect, not a cause");
        job.fail(1, &Error::invalid("body", "this rank"));
        assert!(peer_failure().is_ok(), "a rank's own failure is not a peer's");
    }
}
