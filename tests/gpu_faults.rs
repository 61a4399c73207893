//! Faults with real peers, on every rank of the placement (`WEFT_RANKS`, else one per GPU; several ranks may share
//! a GPU): a rank that never joins init, a rank that stops arriving at a device barrier, a rank that aborts in the
//! middle of a collective, and revoke + shrink to the survivors. In each, every rank gets a typed error, nothing
//! hangs, the device memory the failed communicators held comes back, and a new communicator works afterwards.
//! Each needs two or more ranks and skips, saying so, with one.

#[path = "support/faults.rs"]
mod faults;

use faults::placement_in_group_launch_mode;
use faults::{a_new_communicator_works, assert_released, free_memory, init, on_threads, placement, warm_up};
use weft_kit::test_kernels as kernels;

use std::time::{Duration, Instant};

use weft::host::caps::Lsa;
use weft::host::placement::shared_gpu_config;
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, Placement, ReduceOp, UniqueId};

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_never_joins_init_times_out_on_every_rank() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let timeout = Duration::from_secs(3);
    // Rank n - 1 never calls init.
    let outcomes = on_threads(n - 1, |rank| {
        let sharing = placement.ranks_on_gpu(rank);
        let config = shared_gpu_config(&Config::new(), sharing);
        let started = Instant::now();
        let pending = Communicator::uninit_nonblocking(placement.devices()[rank])
            .and_then(|c| c.sharing_gpu(sharing))
            .and_then(|c| c.init(n, rank, &id, &config));
        let outcome = pending.and_then(|pending| pending.wait(timeout).map(|_| ()));
        (outcome, started.elapsed())
    });
    for (rank, (outcome, took)) in outcomes.iter().enumerate() {
        println!("rank {rank}: {outcome:?} after {took:.2?}");
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "rank {rank}: {outcome:?}");
        assert!(*took >= timeout && *took < timeout * 5, "rank {rank} took {took:?}");
    }
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_stops_arriving_at_a_device_barrier_times_out_then_aborts_on_every_rank() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let outcomes = on_threads(n, |rank| -> Result<u32, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(2, 32);
        let mut outcome = s.clone_htod(&[u32::MAX; 2])?;
        {
            let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_wait_with_deadline::requirements(&cfg))?;
            // The last rank stops arriving: it never launches the kernel its peers wait for.
            if rank != n - 1 {
                kernels::barrier_wait_with_deadline::launch(&s, cfg, &dev, 200_000_000, &mut outcome)?;
                comm.wait(&s, Duration::from_secs(30))?;
            }
        }
        let outcome = weft::host::cuda::download(&s, &outcome)?;
        // The bounded wait ended: every rank leaves by aborting, as a job that lost a peer would.
        comm.abort()?;
        assert!(outcome.iter().all(|&o| o == outcome[0]), "rank {rank}: blocks disagree: {outcome:?}");
        Ok(outcome[0])
    });
    let outcomes: Vec<u32> = outcomes.into_iter().map(|o| o.expect("a rank failed")).collect();
    println!("outcomes (0 ok, 1 timed out, never launched {}): {outcomes:?}", u32::MAX);
    assert!(outcomes[..n - 1].iter().all(|&o| o == 1), "every waiting rank must time out: {outcomes:?}");
    assert_eq!(outcomes[n - 1], u32::MAX);
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_aborts_in_the_middle_of_a_collective_leaves_the_others_a_typed_error_on_every_rank() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let len = 4 << 20;
    let groups = placement.local_groups();
    // Ranks that share a GPU in this process share its CUDA context: an abort frees the rank's buffers at once,
    // and a peer's collective still reading them faults the context for every rank of the process (seen at 4
    // ranks: CUDA_ERROR_ILLEGAL_ADDRESS). Across processes the peers' mappings keep that memory alive. So here the
    // last rank leaves the sequence at the same point, and calls abort once the others have given up on it.
    // Under NCCL_LAUNCH_MODE=GROUP the others never launch that collective: they meet the last rank first (weft's
    // launch gate), and its abort ends their meeting at once, so nothing of theirs reads its memory.
    let shared = (0..n).any(|rank| placement.ranks_on_gpu(rank) > 1) && !weft::host::placement::launches_in_step();
    let survivors_done = std::sync::Barrier::new(n);
    let outcomes = on_threads(n, |rank| -> Result<Option<Error>, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let s = comm.context().new_stream()?;
        let send = s.clone_htod(&vec![1.0f32; len])?;
        let mut recv = s.alloc_zeros::<f32>(len)?;
        // One collective together, then the last rank aborts in the middle of the sequence.
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        comm.wait(&s, Duration::from_secs(30))?;
        if rank == n - 1 {
            if shared {
                survivors_done.wait();
            }
            comm.abort()?;
            return Ok(None);
        }
        let outcome = (|| {
            let error = match comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s) {
                Ok(()) => comm.wait(&s, Duration::from_secs(3)).err(),
                // Under NCCL_LAUNCH_MODE=GROUP: the launch gate's answer, the last rank having left it.
                Err(launch) => Some(launch),
            };
            // Whatever the others saw, they abort: that ends the collective NCCL still runs for them.
            comm.abort()?;
            weft::host::cuda::settle(&s)?;
            Ok(error)
        })();
        // Reached on every path, so the last rank never waits for a survivor that returned early.
        if shared {
            survivors_done.wait();
        }
        outcome
    });
    for (rank, outcome) in outcomes.iter().enumerate().take(n - 1) {
        println!("rank {rank}: {outcome:?}");
        let error = outcome.as_ref().expect("a surviving rank failed outside the collective");
        let in_step = weft::host::placement::launches_in_step();
        assert!(
            matches!(error, Some(Error::Stalled { .. } | Error::Nccl { .. }))
                || (in_step && matches!(error, Some(Error::PeerFailed { rank, .. }) if *rank == n - 1)),
            "rank {rank} must see the collective fail: {error:?}"
        );
    }
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn revoke_then_shrink_to_the_survivors_then_a_correct_collective_on_every_rank() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let sums = on_threads(n, |rank| -> Result<Option<Vec<f32>>, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        if rank == n - 1 {
            // The failed rank: it leaves without a word.
            comm.abort()?;
            return Ok(None);
        }
        let revoked = comm.revoke().map_err(Error::from)?;
        let config = shared_gpu_config(&Config::new().comm_name("weft-survivors"), placement.ranks_on_gpu(rank));
        let shrunk = revoked.shrink(&[n - 1], Some(&config))?;
        assert_eq!((shrunk.nranks(), shrunk.rank()), (n - 1, rank));
        let s = shrunk.context().new_stream()?;
        let send = s.clone_htod(&vec![(rank + 1) as f32; 4096])?;
        let mut recv = s.alloc_zeros::<f32>(4096)?;
        shrunk.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        shrunk.wait(&s, Duration::from_secs(30))?;
        let sum = weft::host::cuda::download(&s, &recv)?;
        shrunk.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
        revoked.destroy().map_err(Error::from)?;
        Ok(Some(sum))
    });
    let want = ((n - 1) * n / 2) as f32;
    for (rank, sum) in sums.into_iter().enumerate().take(n - 1) {
        let sum = sum.expect("a survivor failed").expect("a survivor's sum");
        assert!(sum.iter().all(|&v| v == want), "rank {rank}: {} instead of {want}", sum[0]);
    }
    println!("{} survivors all-reduced {want} after revoke + shrink", n - 1);
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

/// In `spmd`, after one all-reduce together, the last rank's body fails before a second one that the others
/// enqueue: their host-side waits (under `NCCL_LAUNCH_MODE=GROUP`, their launches) end in `Error::PeerFailed` naming
/// it (instead of waiting out the 300 s settle deadline), every communicator is aborted, `spmd` returns the failed
/// rank's own error, and a new communicator works afterwards. (The first all-reduce sets up NCCL's connections: a rank that fails before any collective
/// leaves its peers blocked inside NCCL's connection setup, in the enqueue call, where no host-side wait of weft's
/// can see it: docs/multi-rank.md.)
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_fails_in_spmd_ends_the_waits_of_the_others() {
    let Some(placement) = placement() else { return };
    the_last_rank_fails_in_spmd(&placement, true);
}

/// Under `NCCL_LAUNCH_MODE=GROUP` NCCL launches the ranks of a process in lock step and waits inside the launch, with
/// no timeout, for every one of them. In `spmd` the last rank's body fails before any collective: the others' first
/// all-reduce must end in `Error::PeerFailed` naming it, at weft's launch gate, instead of waiting inside NCCL for
/// good. Skips, saying so, under NCCL's default launch mode, where that all-reduce would wait in NCCL's connection
/// setup instead (the test above says why it starts with one collective together).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_fails_in_spmd_before_any_collective_ends_the_launches_of_the_others_in_group_launch_mode() {
    let Some(placement) = placement_in_group_launch_mode() else { return };
    the_last_rank_fails_in_spmd(&placement, false);
}

/// Under `NCCL_LAUNCH_MODE=GROUP` a communicator split from a gated one is gated too. Every rank (threads of our
/// own, through `sharing_gpu_in`) splits into one child; the last rank then drops its child before any collective
/// on it, and the others' first all-reduce on theirs must end in `Error::PeerFailed` naming it, at the child's launch
/// gate, instead of waiting inside NCCL for good. The parent still all-reduces on every rank afterwards, the memory
/// comes back, and a new communicator works. Skips, saying so, under NCCL's default launch mode.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_rank_that_drops_its_split_child_ends_the_child_launches_of_the_others_in_group_launch_mode() {
    let Some(placement) = placement_in_group_launch_mode() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let started = Instant::now();
    let outcomes = on_threads(n, |rank| -> Result<(Option<Error>, f32), Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let config = shared_gpu_config(&Config::new().comm_name("weft-faults-child"), groups[rank].size());
        let child = comm.split(Some(0), rank as i32, Some(&config))?.expect("every rank gave color 0");
        let s = comm.context().new_stream()?;
        let send = s.clone_htod(&vec![(rank + 1) as f32; 4096])?;
        let mut recv = s.alloc_zeros::<f32>(4096)?;
        let error = if rank == n - 1 {
            // Aborts the child, and leaves its gate.
            drop(child);
            None
        } else {
            let outcome = child.all_reduce(&send, &mut recv, ReduceOp::Sum, &s);
            drop(child);
            Some(outcome.expect_err("the last rank never launches on its child"))
        };
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        comm.wait(&s, Duration::from_secs(30))?;
        let sum = weft::host::cuda::download(&s, &recv)?[0];
        comm.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
        Ok((error, sum))
    });
    let elapsed = started.elapsed();
    let want = (n * (n + 1) / 2) as f32;
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let (error, sum) = outcome.unwrap_or_else(|error| panic!("rank {rank}: {error}"));
        println!("rank {rank}: {error:?}, then the parent's all-reduce gave {sum}");
        if rank < n - 1 {
            assert!(matches!(&error, Some(Error::PeerFailed { rank, .. }) if *rank == n - 1), "{error:?}");
        }
        assert_eq!(sum, want, "rank {rank}: the parent's all-reduce");
    }
    assert!(elapsed < Duration::from_secs(60), "the ranks took {elapsed:?}");
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

/// In `spmd`, after one all-reduce together where `after_a_collective`, the last rank's body fails; the others then
/// enqueue an all-reduce and wait for it. Their launch (under `NCCL_LAUNCH_MODE=GROUP`, where the ranks meet before
/// it) or their wait must end in `Error::PeerFailed` naming the failed rank, `spmd` must return that rank's own
/// error within a minute, the memory must come back, and a new communicator must work.
fn the_last_rank_fails_in_spmd(placement: &Placement, after_a_collective: bool) {
    let before = warm_up(placement);
    let n = placement.nranks();
    let seen = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    let result = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let s = comm.context().new_stream()?;
        let send = s.clone_htod(&vec![1.0f32; 4096])?;
        let mut recv = s.alloc_zeros::<f32>(4096)?;
        if after_a_collective {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
            weft::host::cuda::settle(&s)?;
        }
        if comm.rank() == n - 1 {
            return Err(Error::InvalidArgument { argument: "body", problem: "this rank fails on purpose".into() });
        }
        let outcome = comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s).and_then(|()| weft::host::cuda::settle(&s));
        seen.lock().unwrap().push((comm.rank(), format!("{outcome:?}")));
        assert!(matches!(&outcome, Err(Error::PeerFailed { rank, .. }) if *rank == n - 1), "{outcome:?}");
        outcome
    });
    let elapsed = started.elapsed();
    println!("spmd returned after {elapsed:?}: {result:?}; the others saw {:?}", seen.lock().unwrap());
    assert!(
        matches!(&result, Err(Error::InvalidArgument { problem, .. }) if problem.contains("on purpose")),
        "spmd must return the failed rank's own error: {result:?}"
    );
    assert_eq!(seen.lock().unwrap().len(), n - 1, "every other rank must have stopped waiting");
    assert!(elapsed < Duration::from_secs(60), "the others waited {elapsed:?}");
    assert_released(&before, &free_memory(placement));
    a_new_communicator_works(placement);
}
