//! An abort that NCCL cannot finish does not hold its caller.
//!
//! Two ranks share the GPU. Rank 0 all-reduces a pair of symmetric windows; rank 1 never joins, so rank 0's kernel
//! waits for it. NCCL 2.30's symmetric kernels do not read the abort flag, and the last local rank's
//! `ncclCommAbort` synchronizes every local communicator's internal stream, so NCCL's abort may wait for that kernel
//! for good (docs/multi-rank.md, "What NCCL 2.30's multi-rank mode could not do"). weft's
//! `Communicator::abort_within` must return by its deadline anyway: `Ok` where NCCL's abort finished, or
//! `Error::Stalled` with the abort left on a thread of its own. The test prints which, a fact about NCCL.
//!
//! A kernel that never ends stays on the GPU until the process ends and may hold the CUDA driver when it does, so
//! this test runs only when asked (`WEFT_TEST_STUCK_ABORT=1`), alone in its binary; it skips otherwise, saying so.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::host::placement::{shared_gpu_config, LocalGroup};
use weft::host::{Communicator, Config, Error, Placement, ReduceOp, UniqueId, WindowFlags};

/// How long each rank's abort may take.
const DEADLINE: Duration = Duration::from_secs(5);
/// What a thread switch and a log line may add to it.
const SLACK: Duration = Duration::from_secs(2);
/// Elements per window: 4 MB of f32, a size at which NCCL picks its symmetric kernels for windows (H100, 8 ranks).
const LEN: usize = 1 << 20;

fn init(placement: &Placement, groups: &[Arc<LocalGroup>], rank: usize, id: &UniqueId) -> Result<Communicator, Error> {
    let config = shared_gpu_config(&Config::new().comm_name("weft-stuck-abort"), groups[rank].size());
    Communicator::uninit(placement.devices()[rank])?.sharing_gpu_in(&groups[rank])?.init(
        placement.nranks(),
        rank,
        id,
        &config,
    )
}

/// What one rank saw: its wait for the all-reduce (rank 0 only), then its abort and how long that took.
struct Seen {
    waited: Option<Result<(), Error>>,
    aborted: Result<(), Error>,
    took: Duration,
}

/// One rank's part.
fn rank_part(
    placement: &Placement,
    groups: &[Arc<LocalGroup>],
    rank: usize,
    id: &UniqueId,
    enqueued_barrier: &std::sync::Barrier,
) -> Result<Seen, Error> {
    let comm = init(placement, groups, rank, id)?;
    let s = comm.context().new_stream()?;
    // Rank 1 goes on to its abort only once rank 0 has enqueued the all-reduce it will never join; both reach the
    // barrier whatever failed before it, so neither can wait there for good.
    let prepared = (|| {
        let mut send = comm.alloc_window::<f32>(&s, LEN, WindowFlags::COLL_SYMMETRIC)?;
        let mut recv = comm.alloc_window::<f32>(&s, LEN, WindowFlags::COLL_SYMMETRIC)?;
        send.buffer_mut().copy_from_host(&vec![1.0; LEN])?;
        if rank == 0 {
            comm.all_reduce(send.buffer(), &mut recv.buffer_mut(), ReduceOp::Sum, &s)?;
        }
        Ok::<_, Error>((send, recv))
    })();
    enqueued_barrier.wait();
    let (send, recv) = prepared?;
    let waited = (rank == 0).then(|| comm.wait(&s, Duration::from_secs(3)));
    // Neither window is deregistered: the all-reduce still uses rank 0's, and deregistering is collective.
    std::mem::forget((send, recv));
    let started = Instant::now();
    let aborted = comm.abort_within(DEADLINE);
    Ok(Seen { waited, aborted, took: started.elapsed() })
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_abort_behind_a_stuck_symmetric_collective_returns_by_its_deadline() {
    if std::env::var_os("WEFT_TEST_STUCK_ABORT").is_none_or(|v| v != "1") {
        println!(
            "skipped: leaves a kernel on the GPU until the process ends; run it alone with WEFT_TEST_STUCK_ABORT=1"
        );
        return;
    }
    let version = weft::host::sys::library().unwrap().version();
    if !version.at_least(weft::host::placement::MULTI_RANK_GPU_NCCL) || !weft::host::placement::multi_rank_gpu_enabled()
    {
        println!("skipped: two ranks on one GPU need NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1 (NCCL {version})");
        return;
    }
    if weft::host::placement::launches_in_step() {
        println!(
            "skipped: under NCCL_LAUNCH_MODE=GROUP rank 0 cannot launch an all-reduce that rank 1 never joins (weft's \
             launch gate stops it first: tests/gpu_faults.rs); run it under NCCL's default launch mode"
        );
        return;
    }
    let placement = Placement::new(vec![0, 0]).unwrap();
    let groups = placement.local_groups();
    let id = UniqueId::new().unwrap();
    let enqueued = std::sync::Barrier::new(2);
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|rank| {
                let (placement, groups, id, enqueued) = (&placement, &groups, &id, &enqueued);
                scope.spawn(move || rank_part(placement, groups, rank, id, enqueued))
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("a rank's thread panicked")).collect()
    });
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let Seen { waited, aborted, took } =
            outcome.unwrap_or_else(|error| panic!("rank {rank} failed before its abort: {error}"));
        println!("rank {rank}: the all-reduce's wait: {waited:?}; abort_within: {aborted:?} after {took:.2?}");
        if let Some(waited) = waited {
            assert!(
                matches!(waited, Err(Error::Stalled { .. })),
                "rank 0's all-reduce ended without rank 1: {waited:?}"
            );
        }
        assert!(took < DEADLINE + SLACK, "rank {rank}'s abort held its caller for {took:.2?}, past its deadline");
        assert!(matches!(aborted, Ok(()) | Err(Error::Stalled { .. })), "rank {rank}'s abort: {aborted:?}");
    }
}
