//! GPU tests of CUDA graphs (`weft::host::Graph`, docs/graphs.md) on every rank of the placement (`WEFT_RANKS`,
//! else one rank per GPU): a weft LSA kernel and three NCCL collectives captured once, replayed with new inputs
//! written between replays, against host references; and graph replay against the same work launched eagerly, at
//! small sizes (the figures go to bench/RESULTS.md).

use weft_kit::common::{random, relative_error};
use weft_kit::kernels::allreduce::lsa_allreduce;

use std::sync::{Arc, Barrier};
use std::time::Instant;

use cudarc::driver::CudaStream;
use weft::host::caps::Lsa;
use weft::host::{
    Active, Communicator, Config, DevComm, DeviceBuffer, Error, Graph, LaunchConfig, Placement, ReduceOp, Window,
    WindowFlags,
};

fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

/// One rank's resources for the captured work: the LSA all-reduce's window (this rank's input) and the outputs.
struct Buffers<'comm> {
    window: Window<'comm, f32>,
    reduced: DeviceBuffer<f32>,
    twice: DeviceBuffer<f32>,
    gathered: DeviceBuffer<f32>,
    shard: DeviceBuffer<f32>,
}

impl<'comm> Buffers<'comm> {
    fn new(comm: &'comm Communicator<Active>, s: &Arc<CudaStream>, n: usize) -> Result<Buffers<'comm>, Error> {
        Ok(Buffers {
            window: comm.alloc_window::<f32>(s, n, WindowFlags::COLL_SYMMETRIC)?,
            reduced: DeviceBuffer::new(s, n)?,
            twice: DeviceBuffer::new(s, n)?,
            gathered: DeviceBuffer::new(s, n * comm.nranks())?,
            shard: DeviceBuffer::new(s, n)?,
        })
    }
}

/// What one step records or launches: the weft all-reduce of every rank's window, then NCCL all-reduces its result
/// (every rank holds the same sum, so this is nranks × the sum), all-gathers the inputs and reduce-scatters them
/// (block `rank` of the sum of identical gathers: nranks × this rank's input).
fn capture<'g>(
    comm: &'g Communicator<Active>,
    s: &Arc<CudaStream>,
    cfg: LaunchConfig,
    dev: &'g DevComm<'_, Lsa>,
    b: &'g Buffers<'_>,
    n: usize,
) -> Result<Graph<'g>, Error> {
    Graph::capture(s, |c| {
        lsa_allreduce::record(c, cfg, dev, &b.window, &b.reduced, n)?;
        c.all_reduce(comm, &b.reduced, &b.twice, ReduceOp::Sum)?;
        c.all_gather(comm, b.window.buffer(), &b.gathered)?;
        c.reduce_scatter(comm, &b.gathered, &b.shard, ReduceOp::Sum)
    })
}

/// A weft kernel and three collectives, captured once and replayed three times with new inputs (written through
/// the graph between replays), exact against the host references on every rank; the graph, then its buffers, are
/// dropped while the communicator lives on.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_captured_kernel_and_collectives_replay_with_new_inputs_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    let n = 4099;
    let rounds = 3u64;
    let inputs = |round: u64| -> Vec<Vec<f32>> { (0..nranks).map(|r| random(n, 100 * round + r as u64)).collect() };
    let barrier = Barrier::new(nranks);
    let results = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        // Loads the kernel (before any rank waits for another: docs/multi-rank.md, "Load before launch").
        let cfg = lsa_allreduce::one_wave::<f32>(comm, &s, 512)?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&lsa_allreduce::requirements(&cfg))?;
        let b = Buffers::new(comm, &s, n)?;
        let mut graph = capture(comm, &s, cfg, &dev, &b, n)?;
        assert_eq!(graph.recorded(), 4, "one kernel and three collectives");
        graph.upload()?;
        let mut seen = Vec::new();
        for round in 0..rounds {
            graph.write(b.window.buffer(), &inputs(round)[me])?;
            // Every rank's input is in place before any replay reads it through LSA.
            barrier.wait();
            graph.replay()?;
            seen.push((
                graph.read(&b.reduced)?,
                graph.read(&b.twice)?,
                graph.read(&b.gathered)?,
                graph.read(&b.shard)?,
            ));
            // No rank overwrites its window while a peer's replay may still read it.
            barrier.wait();
        }
        assert_eq!(graph.replays(), rounds);
        drop(graph);
        drop((b, dev));
        Ok((me, seen))
    })
    .unwrap();
    for (me, seen) in results {
        for (round, (reduced, twice, gathered, shard)) in seen.iter().enumerate() {
            let x = inputs(round as u64);
            let sum: Vec<f64> = (0..n).map(|i| x.iter().map(|v| f64::from(v[i])).sum()).collect();
            let times = |v: &[f64], k: usize| -> Vec<f64> { v.iter().map(|s| s * k as f64).collect() };
            let all: Vec<f64> = x.iter().flatten().map(|&v| f64::from(v)).collect();
            let mine: Vec<f64> = x[me].iter().map(|&v| f64::from(v) * nranks as f64).collect();
            let errors = [
                relative_error(reduced, &sum),
                relative_error(twice, &times(&sum, nranks)),
                relative_error(gathered, &all),
                relative_error(shard, &mine),
            ];
            println!("rank {me} of {nranks}, replay {round}: relative errors {errors:?}");
            assert!(errors.iter().all(|&e| e < 1e-6), "rank {me}, replay {round}: {errors:?}");
        }
    }
}

/// The same step launched eagerly (four enqueues) and replayed as a graph (one), `ITERATIONS` times each, alternating
/// in batches, at small sizes where launch overhead dominates: host µs per step, both sides in one process on the
/// same GPU. The outputs of the last step of each side are checked against each other. Figures: bench/RESULTS.md.
#[test]
#[ignore = "needs a CUDA GPU"]
fn graph_replay_against_eager_launches_at_small_sizes_on_every_rank() {
    const ITERATIONS: usize = 200;
    const BATCHES: usize = 5;
    let placement = placement();
    let nranks = placement.nranks();
    for n in [1024usize, 16 * 1024, 256 * 1024] {
        let barrier = Barrier::new(nranks);
        let results = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
            let (me, s) = (comm.rank(), comm.context().new_stream()?);
            let cfg = lsa_allreduce::one_wave::<f32>(comm, &s, 512)?;
            let cfg = LaunchConfig::linear(cfg.grid_dim.0.min(n.div_ceil(512) as u32).max(1), 512);
            let dev: DevComm<'_, Lsa> = comm.dev_comm(&lsa_allreduce::requirements(&cfg))?;
            // One set of buffers for each side: the graph holds its set shared for its life, the eager launches
            // write theirs through `&mut`.
            let (mut on_graph, mut on_eager) = (Buffers::new(comm, &s, n)?, Buffers::new(comm, &s, n)?);
            on_graph.window.buffer_mut().copy_from_host(&random(n, me as u64))?;
            on_eager.window.buffer_mut().copy_from_host(&random(n, me as u64))?;
            barrier.wait();
            let (mut eager_us, mut graph_us) = (Vec::new(), Vec::new());
            let mut graph = capture(comm, &s, cfg, &dev, &on_graph, n)?;
            graph.upload()?;
            for batch in 0..BATCHES * 2 {
                barrier.wait();
                let started = Instant::now();
                if batch % 2 == 0 {
                    for _ in 0..ITERATIONS {
                        graph.replay()?;
                    }
                    graph.settle()?;
                    graph_us.push(started.elapsed().as_secs_f64() * 1e6 / ITERATIONS as f64);
                } else {
                    for _ in 0..ITERATIONS {
                        eager(comm, &s, cfg, &dev, &mut on_eager, n)?;
                    }
                    weft::host::cuda::settle(&s)?;
                    eager_us.push(started.elapsed().as_secs_f64() * 1e6 / ITERATIONS as f64);
                }
            }
            let graph_out = graph.read(&on_graph.twice)?;
            let eager_out = on_eager.twice.copy_to_host()?;
            assert_eq!(graph_out, eager_out, "rank {me}: the graph and the eager step disagree");
            drop(graph);
            barrier.wait();
            Ok((median(eager_us), median(graph_us)))
        })
        .unwrap();
        let eager_us = results.iter().map(|r| r.0).fold(0.0, f64::max);
        let graph_us = results.iter().map(|r| r.1).fold(0.0, f64::max);
        println!(
            "graph vs eager, {nranks} rank(s), {} KB f32 per rank, a weft all-reduce + 3 NCCL collectives per step: \
             eager {eager_us:.2} us/step, graph replay {graph_us:.2} us/step, eager / graph {:.2}x (slowest rank, \
             median of {BATCHES} batches of {ITERATIONS})",
            n * 4 / 1024,
            eager_us / graph_us
        );
    }
}

/// The eager form of [`capture`]'s step.
fn eager(
    comm: &Communicator<Active>,
    s: &Arc<CudaStream>,
    cfg: LaunchConfig,
    dev: &DevComm<'_, Lsa>,
    b: &mut Buffers<'_>,
    n: usize,
) -> Result<(), Error> {
    lsa_allreduce::launch(s, cfg, dev, &b.window, &mut b.reduced, n)?;
    comm.all_reduce(&b.reduced, &mut b.twice, ReduceOp::Sum, s)?;
    comm.all_gather(b.window.buffer(), &mut b.gathered, s)?;
    comm.reduce_scatter(&b.gathered, &mut b.shard, ReduceOp::Sum, s)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
