//! GIN faults with real peers, on every rank of the placement (`WEFT_RANKS`; on one machine through weft's loopback
//! backend, docs/gin.md): a peer that never signals, a peer that aborts while the others wait on its signal, and a
//! communicator revoked after puts that never completed their round. In each, every rank gets a typed outcome (a
//! bounded device wait that times out, then an abort), nothing hangs, the device memory comes back, and a new
//! communicator works afterwards. Each needs two or more ranks and skips, saying so, with one; without GIN each skips
//! too, unless `WEFT_TEST_REQUIRE_GIN=1`.

#[path = "support/faults.rs"]
mod faults;
#[path = "support/gin.rs"]
mod gin;

use std::sync::Barrier;
use std::time::{Duration, Instant};

use faults::{a_new_communicator_works, assert_released, free_memory, init, on_threads, placement, warm_up};
use gin::gin_dev_comm;
use weft::host::caps::Gin;
use weft::host::{Error, LaunchConfig, UniqueId, WindowFlags};
use weft_kit::test_kernels::gin::{gin_put_then_wait_with_deadline as put_then_wait, gin_wait_with_deadline as wait};

/// The outcome codes of the kernels' bounded waits.
const OK: u32 = 0;
const TIMED_OUT: u32 = 1;
const ABORTED: u32 = 2;
const NEVER_LAUNCHED: u32 = u32::MAX;

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_peer_that_never_signals_ends_every_wait_in_a_timeout_then_an_abort() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let timeout = Duration::from_millis(300);
    let outcomes = on_threads(n, |rank| -> Result<Option<(u32, Duration)>, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(1, 32);
        let mut outcome = s.clone_htod(&[NEVER_LAUNCHED])?;
        let started = Instant::now();
        {
            let Some(dev) = gin_dev_comm::<Gin>(&comm, &wait::requirements(&cfg))? else {
                comm.abort()?;
                return Ok(None);
            };
            // Nobody signals anyone; the last rank does not even launch.
            if rank != n - 1 {
                wait::launch(&s, cfg, &dev, 1, timeout.as_nanos() as u64, &mut outcome)?;
                comm.wait(&s, Duration::from_secs(30))?;
            }
        }
        let code = weft::host::cuda::download(&s, &outcome)?[0];
        let took = started.elapsed();
        // The bounded wait ended: every rank leaves by aborting, as a job that lost a peer would.
        comm.abort()?;
        Ok(Some((code, took)))
    });
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let Some((code, took)) = outcome.expect("a rank failed") else { return };
        println!("rank {rank}: outcome {code} after {took:.2?}");
        if rank == n - 1 {
            assert_eq!(code, NEVER_LAUNCHED);
        } else {
            assert_eq!(code, TIMED_OUT, "rank {rank}: the wait for a signal nobody sends must time out");
            assert!(took < timeout * 100, "rank {rank}: {took:?} for a {timeout:?} wait");
        }
    }
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_peer_that_aborts_while_the_others_wait_on_its_signal_leaves_them_a_bounded_wait() {
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let timeout = Duration::from_secs(3);
    let launched = Barrier::new(n);
    let outcomes = on_threads(n, |rank| -> Result<Option<u32>, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(1, 32);
        let mut outcome = s.clone_htod(&[NEVER_LAUNCHED])?;
        let dev = match gin_dev_comm::<Gin>(&comm, &wait::requirements(&cfg)) {
            Ok(Some(dev)) => dev,
            other => {
                let skipped = other.map(|_| None);
                // Every rank must pass the barrier below, whatever happened here.
                launched.wait();
                comm.abort()?;
                return skipped;
            }
        };
        if rank == n - 1 {
            // The failing rank: once the others wait on its signal, it leaves.
            launched.wait();
            drop(dev);
            comm.abort()?;
            return Ok(Some(NEVER_LAUNCHED));
        }
        wait::launch(&s, cfg, &dev, 1, timeout.as_nanos() as u64, &mut outcome)?;
        launched.wait();
        comm.wait(&s, Duration::from_secs(60))?;
        drop(dev);
        let code = weft::host::cuda::download(&s, &outcome)?[0];
        comm.abort()?;
        Ok(Some(code))
    });
    for (rank, outcome) in outcomes.into_iter().enumerate().take(n - 1) {
        let Some(code) = outcome.expect("a surviving rank failed") else { return };
        println!("rank {rank}: outcome {code}");
        assert!(
            code == TIMED_OUT || code == ABORTED,
            "rank {rank}: a wait on a rank that aborted must time out (or see an abort), got {code}"
        );
    }
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_communicator_is_revoked_after_puts_whose_round_never_completed() {
    const COUNT: usize = 4 << 20;
    let Some(placement) = placement() else { return };
    let before = warm_up(&placement);
    let n = placement.nranks();
    let id = UniqueId::new().unwrap();
    let groups = placement.local_groups();
    let outcomes = on_threads(n, |rank| -> Result<Option<u32>, Error> {
        let comm = init(&placement, &groups, rank, &id)?;
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(1, 128);
        let mut outcome = s.clone_htod(&[NEVER_LAUNCHED])?;
        {
            let Some(dev) = gin_dev_comm::<Gin>(&comm, &put_then_wait::requirements(&cfg))? else {
                comm.abort()?;
                return Ok(None);
            };
            let dst = comm.alloc_window::<f32>(&s, COUNT, WindowFlags::COLL_SYMMETRIC)?;
            let src = comm.alloc_window::<f32>(&s, COUNT, WindowFlags::COLL_SYMMETRIC)?;
            // Every rank but the last puts 16 MB to the next and waits (bounded) for its predecessor's put; the
            // last never launches, so rank 0 waits in vain. Dropping the windows waits for each rank's kernel: the
            // borrow checker keeps revoke after them, so no window is deregistered under a put.
            if rank != n - 1 {
                put_then_wait::launch(&s, cfg, &dev, &dst, &src, COUNT, 1, 500_000_000, &mut outcome)?;
            }
        }
        let code = weft::host::cuda::download(&s, &outcome)?[0];
        let revoked = comm.revoke().map_err(Error::from)?;
        revoked.destroy().map_err(Error::from)?;
        Ok(Some(code))
    });
    for (rank, outcome) in outcomes.into_iter().enumerate() {
        let Some(code) = outcome.expect("a rank failed") else { return };
        println!("rank {rank}: outcome {code}");
        let want = match rank {
            0 => TIMED_OUT,
            r if r == n - 1 => NEVER_LAUNCHED,
            _ => OK,
        };
        assert_eq!(code, want, "rank {rank}");
    }
    assert_released(&before, &free_memory(&placement));
    a_new_communicator_works(&placement);
}
