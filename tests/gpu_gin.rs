//! GPU tests of GIN (GPU-initiated networking) kernels on every rank of the placement (`WEFT_RANKS`), against host
//! references: puts with signals and counters, put_value with a signal addition, rail GIN barriers, and a hybrid
//! LSA + GIN all-reduce over LSA teams and rails.
//!
//! On one machine GIN runs through weft's loopback RMA backend (`NCCL_RMA_PLUGIN=…/libweft_gin_loopback.so`,
//! docs/gin.md); `NCCL_LSA_TEAM_SIZE` chooses the LSA teams (1: every rank its own, so the rail team spans all
//! ranks). Without a GIN backend each test skips, saying why — unless `WEFT_TEST_REQUIRE_GIN=1`, where a missing
//! GIN is a failure (scripts/gpu-check.sh sets it where it provides the backend).

#[path = "support/gin.rs"]
mod gin;

use std::sync::Arc;
use weft::host::caps::{Gin, LsaGin};

use weft::host::cudarc::driver::CudaStream;
use weft::host::{Communicator, Config, Error, LaunchConfig, Placement, ReduceOp, WindowFlags};

fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

use gin::gin_dev_comm;
use weft_kit::test_kernels::gin::{gin_barrier_rounds, gin_put_everywhere, gin_put_value_ring, hybrid_allreduce};

/// Returns once every rank has got here with its earlier work on `s` done (a settled one-element all-reduce):
/// no rank's puts may land in a peer's window before the peer has written its initial values there.
fn all_ranks_ready(comm: &Communicator, s: &Arc<CudaStream>) -> Result<(), Error> {
    weft::host::cuda::settle(s)?;
    let one = s.clone_htod(&[1.0f32])?;
    let mut sum = s.alloc_zeros::<f32>(1)?;
    comm.all_reduce(&one, &mut sum, ReduceOp::Sum, s)?;
    weft::host::cuda::settle(s)
}

fn values(rank: usize, len: usize) -> Vec<f32> {
    (0..len).map(|i| (rank * 10_000 + i) as f32).collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gin_puts_with_signals_and_counters_land_on_every_rank() {
    const CHUNK: usize = 4096;
    let outcomes = weft::host::spmd(placement().devices(), &Config::new(), |comm| {
        let cfg = LaunchConfig::linear(1, 128);
        let Some(dev) = gin_dev_comm::<Gin>(comm, &gin_put_everywhere::requirements(&cfg))? else { return Ok(None) };
        let s = comm.context().new_stream()?;
        let rail = comm.team_rail()?;
        let n = rail.nranks() as usize;
        let mut inbox = comm.alloc_window::<f32>(&s, n * CHUNK, WindowFlags::COLL_SYMMETRIC)?;
        let mut src = comm.alloc_window::<f32>(&s, CHUNK, WindowFlags::COLL_SYMMETRIC)?;
        inbox.buffer_mut().copy_from_host(&vec![-1.0; n * CHUNK])?;
        src.buffer_mut().copy_from_host(&values(comm.rank(), CHUNK))?;
        let mut seen = s.alloc_zeros::<u64>(2)?;
        all_ranks_ready(comm, &s)?;
        gin_put_everywhere::launch(&s, cfg, &dev, &inbox, &src, CHUNK, &mut seen)?;
        let seen = comm.download(&s, &seen)?;
        let got = inbox.buffer().copy_to_host()?;
        let mut expected = vec![-1.0; n * CHUNK];
        for member in 0..rail.nranks() {
            if member != rail.rank() {
                let world = comm.team_rank_to_world(rail, member)? as usize;
                expected[member as usize * CHUNK..][..CHUNK].copy_from_slice(&values(world, CHUNK));
            }
        }
        Ok(Some((comm.rank(), n, seen, got == expected)))
    })
    .unwrap();
    for (rank, n, seen, correct) in outcomes.into_iter().flatten() {
        println!(
            "rank {rank}: rail of {n}, signal 0 = {}, counter 0 = {}, chunks correct: {correct}",
            seen[0], seen[1]
        );
        assert!(correct, "rank {rank}: the chunks that landed differ from the peers' sources");
        assert_eq!(seen, [n as u64 - 1, n as u64 - 1], "rank {rank}: one signal and one counter per put");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gin_put_value_with_signal_add_reaches_the_next_rank() {
    let outcomes = weft::host::spmd(placement().devices(), &Config::new(), |comm| {
        let cfg = LaunchConfig::linear(1, 32);
        let Some(dev) = gin_dev_comm::<Gin>(comm, &gin_put_value_ring::requirements(&cfg))? else { return Ok(None) };
        let s = comm.context().new_stream()?;
        let rail = comm.team_rail()?;
        let mut cell = comm.alloc_window::<u64>(&s, 1, WindowFlags::COLL_SYMMETRIC)?;
        cell.buffer_mut().copy_from_host(&[0])?;
        let mut seen = s.alloc_zeros::<u64>(1)?;
        all_ranks_ready(comm, &s)?;
        gin_put_value_ring::launch(&s, cfg, &dev, &cell, &mut seen)?;
        let seen = comm.download(&s, &seen)?;
        let from = (rail.rank() + rail.nranks() - 1) % rail.nranks();
        Ok(Some((comm.rank(), from as u64, seen[0], cell.buffer().copy_to_host()?[0])))
    })
    .unwrap();
    for (rank, from, signal, cell) in outcomes.into_iter().flatten() {
        println!("rank {rank}: cell {cell}, signal 1 = {signal} (from rail rank {from})");
        assert_eq!(cell, (from + 1) * 1000, "rank {rank}: the value put by its predecessor");
        assert_eq!(signal, from + 1, "rank {rank}: the predecessor's signal addition");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rail_gin_barriers_complete_on_every_rank() {
    const ROUNDS: u32 = 64;
    let outcomes = weft::host::spmd(placement().devices(), &Config::new(), |comm| {
        let cfg = LaunchConfig::linear(1, 64);
        let Some(dev) = gin_dev_comm::<Gin>(comm, &gin_barrier_rounds::requirements(&cfg))? else { return Ok(None) };
        let s = comm.context().new_stream()?;
        let mut seen = s.alloc_zeros::<u64>(1)?;
        gin_barrier_rounds::launch(&s, cfg, &dev, ROUNDS, 10_000_000_000, &mut seen)?;
        Ok(Some((comm.rank(), comm.download(&s, &seen)?[0])))
    })
    .unwrap();
    for (rank, passed) in outcomes.into_iter().flatten() {
        println!("rank {rank}: {passed} of {ROUNDS} rail barriers in time");
        assert_eq!(passed, u64::from(ROUNDS), "rank {rank}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_hybrid_lsa_and_gin_allreduce_matches_the_host_sum() {
    const N: usize = 2048;
    let placement = placement();
    let nranks = placement.nranks();
    let want: Vec<f32> = (0..N).map(|i| (0..nranks).map(|r| values(r, N)[i]).sum()).collect();
    let outcomes = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let cfg = LaunchConfig::linear(1, 256);
        let Some(dev) = gin_dev_comm::<LsaGin>(comm, &hybrid_allreduce::requirements(&cfg))? else { return Ok(None) };
        let s = comm.context().new_stream()?;
        let rails = comm.team_rail()?.nranks() as usize;
        let mut x = comm.alloc_window::<f32>(&s, N, WindowFlags::COLL_SYMMETRIC)?;
        let mut parts = comm.alloc_window::<f32>(&s, rails * N, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&values(comm.rank(), N))?;
        parts.buffer_mut().copy_from_host(&vec![0.0; rails * N])?;
        let mut out = s.alloc_zeros::<f32>(N)?;
        all_ranks_ready(comm, &s)?;
        hybrid_allreduce::launch(&s, cfg, &dev, &x, &parts, &mut out, N)?;
        let lsa = comm.team_lsa()?.nranks();
        Ok(Some((comm.rank(), lsa, rails, comm.download(&s, &out)?)))
    })
    .unwrap();
    for (rank, lsa, rails, got) in outcomes.into_iter().flatten() {
        println!(
            "rank {rank}: LSA teams of {lsa}, rails of {rails}: sum {}",
            if got == want { "exact" } else { "WRONG" }
        );
        assert_eq!(got, want, "rank {rank}");
    }
}
