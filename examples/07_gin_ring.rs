//! A ring all-gather over GIN (GPU-initiated networking: put + signal from inside a kernel), on every visible GPU —
//! where the communicator has GIN. Everywhere else it shows what weft's types promise: the kernel compiles, and the
//! one run-time capability check, `comm.dev_comm::<Gin>()`, refuses cleanly before anything is launched.
//!
//! ```sh
//! cargo run --release --example gin_ring
//! ```
//!
//! The kernel (`kernels/gin_ring.rs`) takes `&DevComm<Gin>`, so its launcher only accepts a device communicator
//! whose capability set includes GIN; asking for one is where a machine without a GIN-capable network (NVLink
//! only, or one GPU — every machine here so far) stops with `Error::MissingCapability`. The example prints that
//! error and exits 0: a missing capability is a fact about the machine, not a failure. With GIN, every rank
//! contributes a chunk, the ring gathers the chunks of its rail team (one rank per node at the same local index),
//! each rank checks the result against what its rail peers sent, and the median time of 20 runs is printed.
//!
//! On a machine without a GPU it compiles the kernel with nvcc against every NCCL release's headers it finds,
//! says so, and exits 0.

use weft_kit::common;
use weft_kit::kernels;

use common::Result;
use kernels::gin_ring::gin_ring_allgather as ring;
use weft::host::caps::Gin;
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, WindowFlags};

/// Elements per rank: 4 MB of f32.
const CHUNK: usize = 1 << 20;
const WARMUP: usize = 3;
const ITERATIONS: usize = 20;

fn main() -> Result<()> {
    println!("weft example 07 — ring all-gather with GIN put + signal\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[ring::compile_check],
            &[],
            "asks each rank's communicator for a DevComm<Gin>. Without GIN (NVLink-only or single-GPU machines) \
             it prints the capability error and stops there, successfully; with GIN it runs a ring all-gather of \
             4 MB per rank over the rail team, checks it and prints its median time.",
        ),
    }
}

/// One rank's outcome.
enum Outcome {
    /// The communicator has no GIN: the capability error, as the runtime worded it.
    NoGin(String),
    /// The ring ran: rail team size, median µs, whether the gathered data matched.
    Ran { rail: usize, micros: f64, correct: bool },
}

/// This rank's chunk: distinct values per world rank.
fn chunk_of(world_rank: usize) -> Vec<f32> {
    common::random(CHUNK, 7000 + world_rank as u64)
}

fn run() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    let outcomes = ranks.run(&Config::new(), rank)?;
    let mut failed = 0;
    for (r, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Outcome::NoGin(error) => println!("rank {r}: no GIN device communicator: {error}"),
            Outcome::Ran { rail, micros, correct } => {
                println!(
                    "rank {r}: ring all-gather over a rail team of {rail}: {micros:.1} µs, {:.1} GB/s received, {}",
                    ((rail - 1) * CHUNK * 4) as f64 / (micros * 1e-6) / 1e9,
                    if *correct { "correct" } else { "WRONG" }
                );
                failed += usize::from(!correct);
            }
        }
    }
    if outcomes.iter().all(|o| matches!(o, Outcome::NoGin(_))) {
        println!(
            "\nThis machine has no GIN: the kernel compiled (its launcher takes only a DevComm whose capabilities \
             include GIN), the capability check refused at run time, nothing was launched. On one machine, weft's \
             loopback backend gives GIN to ranks sharing a GPU (docs/gin.md)."
        );
        return Ok(());
    }
    if failed == 0 {
        println!("\ncheck: every rank holds every rail peer's chunk");
        Ok(())
    } else {
        Err(format!("{failed} rank(s) gathered wrong data").into())
    }
}

fn rank(comm: &Communicator) -> std::result::Result<Outcome, Error> {
    let properties = comm.properties()?;
    if comm.rank() == 0 {
        println!("rank 0: {properties}");
    }
    let cfg = LaunchConfig::linear(1, 256);
    // The single run-time capability check; from here on the types carry it.
    let dev: DevComm<'_, Gin> = match comm.dev_comm(&ring::requirements(&cfg)) {
        Ok(dev) => dev,
        Err(error @ Error::MissingCapability { .. }) => return Ok(Outcome::NoGin(error.to_string())),
        Err(error) => return Err(error),
    };
    let stream = comm.context().new_stream()?;
    let rail = comm.team_rail()?;
    let rail_size = rail.nranks() as usize;
    let mut data = comm.alloc_window::<f32>(&stream, rail_size * CHUNK, WindowFlags::COLL_SYMMETRIC)?;
    data.buffer_mut().copy_from_host(&vec![f32::NAN; rail_size * CHUNK])?;
    let src = stream.clone_htod(&chunk_of(comm.rank()))?;

    ring::launch(&stream, cfg, &dev, &data, &src, CHUNK)?;
    weft::host::cuda::settle(&stream)?;
    let got = data.buffer().copy_to_host()?;
    let mut correct = true;
    for member in 0..rail.nranks() {
        let world = comm.team_rank_to_world(rail, member)? as usize;
        let at = member as usize * CHUNK;
        correct &= got[at..at + CHUNK] == chunk_of(world)[..];
    }

    let stopwatch = common::Stopwatch::new(comm.context())?;
    let times = common::time_variants(&stopwatch, &stream, WARMUP, ITERATIONS, 1, |_| {
        ring::launch(&stream, cfg, &dev, &data, &src, CHUNK)
    })?;
    weft::host::cuda::settle(&stream)?;
    Ok(Outcome::Ran { rail: rail_size, micros: times[0], correct })
}
