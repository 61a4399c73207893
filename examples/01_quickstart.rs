//! weft's quickstart: on every visible GPU, a weft LSA all-reduce kernel checked against `ncclAllReduce` and a
//! host reference, with timings of both.
//!
//! ```sh
//! cargo run --release --example quickstart
//! WEFT_RANKS=4 cargo run --release --example quickstart   # 4 ranks (several per GPU need NCCL >= 2.30 and
//!                                                         # NCCL_MULTI_RANK_GPU_ENABLE=1)
//! ```
//!
//! On a machine without a GPU it fakes nothing: it generates the kernel's CUDA C++, compiles it with nvcc for
//! sm_90 against each NCCL release's headers it can find (proving the toolchain), says that no GPU was found and
//! what it would have run, and exits successfully.

use weft_kit::common;
use weft_kit::kernels;

use common::{median, relative_error, Result};
use kernels::allreduce::lsa_allreduce;
use weft::host::caps::Lsa;
use weft::host::{Communicator, ReduceOp, WindowFlags};
use weft::prelude::Config;

const ELEMENTS: usize = 16 << 20; // 64 MB of f32 per rank
const MEGABYTES: usize = (ELEMENTS * 4) >> 20;
const ITERATIONS: usize = 20;

fn main() -> Result<()> {
    println!("weft quickstart — one-shot LSA all-reduce written with #[weft::kernel]\n");
    match common::gpus() {
        Ok(_) => run_on_gpus(),
        Err(why) => common::without_gpu(
            &why,
            &[lsa_allreduce::compile_check],
            &[],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n): it all-reduces {MEGABYTES} MB of f32 per rank with the kernel above and \
                 with ncclAllReduce, checks both against an f64 host reference, and prints the median time of each \
                 over {ITERATIONS} runs."
            ),
        ),
    }
}

/// Deterministic inputs for rank `rank`: every rank can compute every other rank's, for the host reference.
fn input(rank: usize, len: usize) -> Vec<f32> {
    common::random(len, rank as u64)
}

struct RankReport {
    rank: usize,
    weft_ms: f32,
    nccl_ms: f32,
    weft_error: f64,
    nccl_error: f64,
}

fn run_on_gpus() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    println!("{} MB of f32 per rank", MEGABYTES);
    let reports = ranks.run(&Config::new(), rank)?;
    let nranks = ranks.nranks();
    println!("\nrank | weft kernel | ncclAllReduce | weft/nccl | rel. error weft | rel. error nccl");
    for r in &reports {
        println!(
            "{:4} | {:8.3} ms | {:10.3} ms | {:9.2} | {:15.2e} | {:15.2e}",
            r.rank,
            r.weft_ms,
            r.nccl_ms,
            r.weft_ms / r.nccl_ms,
            r.weft_error,
            r.nccl_error
        );
    }
    let bytes = (ELEMENTS * 4) as f64;
    let worst = reports.iter().map(|r| r.weft_ms).fold(0.0f32, f32::max);
    println!(
        "\n{nranks} rank(s): weft moves {:.1} GB/s per rank (reads {nranks} x {} MB, writes {} MB)",
        bytes * (nranks as f64 + 1.0) / (f64::from(worst) * 1e-3) / 1e9,
        MEGABYTES,
        MEGABYTES
    );
    let ok = reports.iter().all(|r| r.weft_error < 1e-6 && r.nccl_error < 1e-6);
    println!("check against the f64 host reference: {}", if ok { "passed" } else { "FAILED" });
    if ok {
        Ok(())
    } else {
        Err("the all-reduce result does not match the host reference".into())
    }
}

fn rank(comm: &Communicator) -> std::result::Result<RankReport, weft::host::Error> {
    let stream = comm.context().new_stream()?;
    let n = ELEMENTS;
    // One full wave of blocks for this kernel on this rank's share of its GPU (grid-stride loops cover the rest).
    let cfg = lsa_allreduce::one_wave::<f32>(comm, &stream, 512)?;
    let dev = comm.dev_comm::<Lsa>(&lsa_allreduce::requirements(&cfg))?;
    let mut window = comm.alloc_window::<f32>(&stream, n, WindowFlags::COLL_SYMMETRIC)?;
    window.buffer_mut().copy_from_host(&input(comm.rank(), n))?;
    let mut weft_out = stream.clone_htod(&vec![f32::NAN; n])?;
    let mut nccl_out = stream.clone_htod(&vec![f32::NAN; n])?;

    // The host reference, in f64.
    let mut reference = vec![0f64; n];
    for r in 0..comm.nranks() {
        for (acc, v) in reference.iter_mut().zip(input(r, n)) {
            *acc += f64::from(v);
        }
    }

    // Checked runs first (outputs poisoned with NaN above), then timed ones.
    lsa_allreduce::launch(&stream, cfg, &dev, &window, &mut weft_out, n)?;
    comm.all_reduce(window.buffer(), &mut nccl_out, ReduceOp::Sum, &stream)?;
    let weft_error = relative_error(&weft::host::cuda::download(&stream, &weft_out)?, &reference);
    let nccl_error = relative_error(&weft::host::cuda::download(&stream, &nccl_out)?, &reference);

    let start = comm.context().new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let end = comm.context().new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))?;
    let (mut weft_times, mut nccl_times) = (Vec::new(), Vec::new());
    for iteration in 0..ITERATIONS + 3 {
        start.record(&stream)?;
        lsa_allreduce::launch(&stream, cfg, &dev, &window, &mut weft_out, n)?;
        end.record(&stream)?;
        let weft = start.elapsed_ms(&end)?;
        start.record(&stream)?;
        comm.all_reduce(window.buffer(), &mut nccl_out, ReduceOp::Sum, &stream)?;
        end.record(&stream)?;
        let nccl = start.elapsed_ms(&end)?;
        if iteration >= 3 {
            weft_times.push(weft);
            nccl_times.push(nccl);
        }
    }
    weft::host::cuda::settle(&stream)?;
    Ok(RankReport {
        rank: comm.rank(),
        weft_ms: median(weft_times),
        nccl_ms: median(nccl_times),
        weft_error,
        nccl_error,
    })
}
