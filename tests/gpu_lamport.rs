//! GPU tests of the barrier-free one-shot all-reduce + bias + residual (kit/src/kernels/allreduce_lamport.rs) on
//! every rank of the placement (`WEFT_RANKS`, else one rank per GPU): many consecutive rounds (the three buffers
//! rotate several times, with and without the host waiting between rounds) against the f64 host reference in f32
//! and bf16, and a peer that never launches: the round ends in `Error::Stalled`, not a hang, and after a reset on
//! every rank the next round is right again.

use weft_kit::common::{self, Real};
use weft_kit::kernels::allreduce_lamport::allreduce_bias_residual_lamport as kernel;
use weft_kit::lamport::LamportAllReduce;

use std::sync::Barrier;
use std::time::Duration;

use weft::host::caps::Lsa;
use weft::host::{Config, DevComm, DeviceBuffer, Placement};

fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

const BLOCK: u32 = 512;
const BIAS_SEED: u64 = 7;
const RESIDUAL_SEED: u64 = 8;

fn x_seed(round: usize, rank: usize) -> u64 {
    1000 * round as u64 + rank as u64
}

/// `sum over ranks of x + bias + residual` in f64, from the values as rounded to `T`.
fn reference<T: Real>(nranks: usize, round: usize, n: usize, hidden: usize) -> Vec<f64> {
    let bias = common::random_as::<T>(hidden, BIAS_SEED);
    let residual = common::random_as::<T>(n, RESIDUAL_SEED);
    let xs: Vec<Vec<T>> = (0..nranks).map(|r| common::random_as::<T>(n, x_seed(round, r))).collect();
    (0..n)
        .map(|i| residual[i].value() + bias[i % hidden].value() + xs.iter().map(|x| x[i].value()).sum::<f64>())
        .collect()
}

/// `ROUNDS` rounds with new inputs, each checked (the host waits between them), then `BURST` rounds launched back
/// to back on the last inputs and the last result checked: every round exact within the type's tolerance.
fn rounds_match<T: Real>(placement: &Placement, rows: usize, hidden: usize) {
    const ROUNDS: usize = 7;
    const BURST: usize = 20;
    let nranks = placement.nranks();
    let n = rows * hidden;
    let references: Vec<Vec<f64>> = (0..ROUNDS).map(|round| reference::<T>(nranks, round, n, hidden)).collect();
    let errors = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        let cfg = kernel::one_wave::<T>(comm, &s, BLOCK)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernel::requirements(&cfg))?;
        let mut lamport = LamportAllReduce::<T>::new(comm, &s, cfg, n, hidden)?;
        let bias = DeviceBuffer::from_host(&s, &common::random_as::<T>(hidden, BIAS_SEED))?;
        let residual = DeviceBuffer::from_host(&s, &common::random_as::<T>(n, RESIDUAL_SEED))?;
        let mut x = DeviceBuffer::<T>::new(&s, n)?;
        let mut out = DeviceBuffer::from_host(&s, &vec![T::nan(); n])?;
        let mut errors = Vec::new();
        for (round, want) in references.iter().enumerate() {
            x.copy_from_host(&common::random_as::<T>(n, x_seed(round, me)))?;
            out.copy_from_host(&vec![T::nan(); n])?;
            lamport.launch(&s, &dev, &x, &bias, &residual, &mut out)?;
            lamport.check()?;
            errors.push(common::relative_error(&out.copy_to_host()?, want));
        }
        for _ in 0..BURST {
            lamport.launch(&s, &dev, &x, &bias, &residual, &mut out)?;
        }
        lamport.check()?;
        errors.push(common::relative_error(&out.copy_to_host()?, &references[ROUNDS - 1]));
        Ok((me, errors))
    })
    .unwrap();
    for (me, errors) in errors {
        println!(
            "lamport {} {rows}x{hidden}, rank {me} of {nranks}: relative errors per round {errors:?} (last: after \
             {BURST} rounds back to back)",
            common::type_name::<T>()
        );
        assert!(errors.iter().all(|&e| common::passes::<T>(e)), "rank {me}: {errors:?}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn rounds_match_the_host_reference_on_every_rank() {
    let placement = placement();
    for (rows, hidden) in [(1, 1024), (16, 4096), (128, 4096)] {
        rounds_match::<f32>(&placement, rows, hidden);
        rounds_match::<half::bf16>(&placement, rows, hidden);
    }
}

/// One round captured into a CUDA graph and replayed `REPLAYS` times with new inputs written between replays (no host
/// barrier: the rounds are counted on the device and the buffers rotate), each replay checked.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_replayed_rounds_match_the_host_reference_on_every_rank() {
    const REPLAYS: usize = 6;
    let placement = placement();
    let nranks = placement.nranks();
    let (rows, hidden) = (8, 4096);
    let n = rows * hidden;
    let references: Vec<Vec<f64>> = (0..REPLAYS).map(|round| reference::<f32>(nranks, round, n, hidden)).collect();
    let results = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        let cfg = kernel::one_wave::<f32>(comm, &s, BLOCK)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernel::requirements(&cfg))?;
        let lamport = LamportAllReduce::<f32>::new(comm, &s, cfg, n, hidden)?;
        let bias = DeviceBuffer::from_host(&s, &common::random_as::<f32>(hidden, BIAS_SEED))?;
        let residual = DeviceBuffer::from_host(&s, &common::random_as::<f32>(n, RESIDUAL_SEED))?;
        let x = DeviceBuffer::from_host(&s, &vec![0.0f32; n])?;
        let out = DeviceBuffer::from_host(&s, &vec![f32::NAN; n])?;
        let mut graph = weft::host::Graph::capture(&s, |c| lamport.record(c, &dev, &x, &bias, &residual, &out))?;
        let mut errors = Vec::new();
        for (round, want) in references.iter().enumerate() {
            graph.write(&x, &common::random_as::<f32>(n, x_seed(round, me)))?;
            graph.write(&out, &vec![f32::NAN; n])?;
            graph.replay()?;
            errors.push(common::relative_error(&graph.read(&out)?, want));
        }
        graph.settle()?;
        lamport.check()?;
        drop(graph);
        Ok((me, errors))
    })
    .unwrap();
    for (me, errors) in results {
        println!("lamport from a CUDA graph, rank {me} of {nranks}: relative errors per replay {errors:?}");
        assert!(errors.iter().all(|&e| e < 1e-5), "rank {me}: {errors:?}");
    }
}

/// Rank 0 launches a round alone: its blocks wait for the peers' packs until the timeout, the round reports
/// `Error::Stalled`, and after every rank resets its buffers a round on every rank is right again.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_peer_that_never_launches_ends_the_round_in_an_error_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    if nranks < 2 {
        println!("skipped: a missing peer needs at least 2 ranks (WEFT_RANKS=2 runs two on one GPU with NCCL >= 2.30)");
        return;
    }
    let (rows, hidden) = (4, 1024);
    let n = rows * hidden;
    let want = reference::<f32>(nranks, 0, n, hidden);
    let barrier = Barrier::new(nranks);
    let results = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        let cfg = kernel::one_wave::<f32>(comm, &s, BLOCK)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernel::requirements(&cfg))?;
        let mut lamport =
            LamportAllReduce::<f32>::new(comm, &s, cfg, n, hidden)?.with_timeout(Duration::from_millis(200));
        let bias = DeviceBuffer::from_host(&s, &common::random_as::<f32>(hidden, BIAS_SEED))?;
        let residual = DeviceBuffer::from_host(&s, &common::random_as::<f32>(n, RESIDUAL_SEED))?;
        let x = DeviceBuffer::from_host(&s, &common::random_as::<f32>(n, x_seed(0, me)))?;
        let mut out = DeviceBuffer::from_host(&s, &vec![f32::NAN; n])?;
        barrier.wait();
        let alone = if me == 0 {
            lamport.launch(&s, &dev, &x, &bias, &residual, &mut out)?;
            Some(lamport.check())
        } else {
            None
        };
        // Rank 0's kernel has stopped (check waited for it) before anyone resets.
        barrier.wait();
        lamport.reset()?;
        barrier.wait();
        lamport.launch(&s, &dev, &x, &bias, &residual, &mut out)?;
        lamport.check()?;
        let error = common::relative_error(&out.copy_to_host()?, &want);
        Ok((me, alone.map(|r| r.err().map(|e| e.to_string())), error))
    })
    .unwrap();
    for (me, alone, error) in results {
        if me == 0 {
            let alone = alone.expect("rank 0 ran alone");
            println!("rank 0 alone: {alone:?}");
            assert!(alone.as_deref().is_some_and(|e| e.contains("did not finish")), "rank 0: {alone:?}");
        }
        println!("rank {me} of {nranks}: after the reset, relative error {error:.1e}");
        assert!(error < 1e-5, "rank {me}: {error}");
    }
}
