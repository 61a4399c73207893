//! Mixture-of-experts token dispatch and combine over LSA — an all-to-all with variable counts per peer — as weft
//! kernels, against the usual pack + `ncclAllToAll` of counts + host synchronisation + grouped `ncclSend`/`ncclRecv`
//! + unpack, on every visible GPU.
//!
//! ```sh
//! cargo run --release --example moe_dispatch
//! ```
//!
//! Every rank has `tokens` tokens of `hidden` elements, each routed to one of `4 x ranks` experts (top-1, skewed
//! towards the low experts so that the counts per peer differ); expert `e` lives on rank `e / 4`. A layer sends
//! every token to its expert's rank (dispatch), applies the expert there (here a stand-in: multiply by
//! `expert + 1`), and brings the result back, weighted by the token's gate (combine). Received tokens are laid
//! out by source rank, then token order, with their expert ids beside them.
//!
//! - fused (`kernels/moe.rs`): route (counts pushed into each destination's small `meta` window), dispatch (each
//!   rank pulls its tokens from the sources' windows), expert, combine (each rank pulls its tokens' outputs back) —
//!   four kernels, no host round trip;
//! - unfused (`benches/cuda/moe_dispatch_epilogue.cu` + NCCL): route, `ncclAllToAll` of the counts, copy to the host
//!   and synchronise (NCCL's point-to-point sizes are host arguments), pack tokens by destination, grouped
//!   `ncclSend`/`ncclRecv` of tokens and expert ids, expert, grouped send/receive back, unpack with the gates.
//!
//! Bytes per rank beyond the moved tokens themselves: the fused path reads every token row once where it lives and
//! writes it once where it goes, in both directions; the unfused one also writes and reads the packed send buffer
//! and the returned buffer (two more passes over this rank's tokens) and stalls on the host for the counts.
//!
//! Both are checked against a host reference — the received rows, their expert ids and count, and the combined
//! output (outputs poisoned first) — and timed end to end with CUDA events (median of 20 after 3 warm-up rounds,
//! interleaved). Needs every rank in one LSA team, at most 64 ranks. On a machine without a GPU it compiles the
//! kernels and the baseline with nvcc against every NCCL release's headers it finds, says so, and exits 0.

use weft_kit::common;
use weft_kit::kernels;
#[path = "moe/unfused.rs"]
mod unfused;

use std::sync::Arc;

use common::{Real, Result};
use cudarc::driver::{CudaSlice, CudaStream};
use kernels::moe::{moe_combine, moe_dispatch, moe_route, moe_toy_expert};
use unfused::{BaselineKernels, Unfused};
use weft::host::caps::Lsa;
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, Window, WindowFlags};

/// `(tokens per rank, hidden)`: a decode step and a prefill chunk.
const SHAPES: &[(usize, usize)] = &[(128, 4096), (2048, 4096)];
const EXPERTS_PER_RANK: u32 = 4;
const BLOCK: u32 = 256;
const ROUTE_BLOCK: u32 = 1024;
const WARMUP: usize = 3;
const ITERATIONS: usize = 20;

fn main() -> Result<()> {
    println!("weft example 06 — MoE dispatch/combine: a variable-count all-to-all over LSA\n");
    match common::gpus() {
        Ok(_) => run(),
        Err(why) => common::without_gpu(
            &why,
            &[
                moe_route::compile_check,
                moe_dispatch::compile_check,
                moe_toy_expert::compile_check,
                moe_combine::compile_check,
            ],
            &[("moe_dispatch_epilogue", unfused::BASELINE)],
            &format!(
                "runs one rank per GPU (WEFT_RANKS=n runs n) and, for (tokens per rank, hidden) in {SHAPES:?} and f32 and bf16, dispatches \
                 every token to its expert's rank, applies a stand-in expert and combines the results, with the \
                 fused route/dispatch/combine kernels and with pack + ncclAllToAll of the counts + grouped \
                 ncclSend/ncclRecv + unpack, checks both against a host reference and prints their median times."
            ),
        ),
    }
}

/// One rank's inputs: tokens (`tokens x hidden`), expert per token (skewed), gate per token.
struct Inputs<T> {
    x: Vec<T>,
    experts: Vec<u32>,
    gate: Vec<f32>,
}

fn inputs<T: Real>(rank: usize, nranks: usize, tokens: usize, hidden: usize) -> Inputs<T> {
    let nexperts = EXPERTS_PER_RANK as usize * nranks;
    let experts = common::random(tokens, 5000 + rank as u64)
        .into_iter()
        .map(|u| {
            let u = f64::from(u + 1.0) / 2.0; // [0, 1)
            ((u * u * nexperts as f64) as usize).min(nexperts - 1) as u32
        })
        .collect();
    let gate = common::random(tokens, 6000 + rank as u64).into_iter().map(|u| 0.55 + 0.45 * u).collect();
    Inputs { x: common::random_as::<T>(tokens * hidden, 4000 + rank as u64), experts, gate }
}

/// What rank `me` must receive and produce.
struct Reference {
    /// Received rows, by source then token order.
    recv: Vec<f64>,
    recv_expert: Vec<u32>,
    /// Tokens received from each source.
    from_each: Vec<usize>,
    /// The combined output for this rank's tokens.
    out: Vec<f64>,
}

fn reference<T: Real>(me: usize, nranks: usize, tokens: usize, hidden: usize) -> Reference {
    let (mut recv, mut recv_expert, mut from_each) = (Vec::new(), Vec::new(), Vec::new());
    let mut out = Vec::new();
    for source in 0..nranks {
        let input = inputs::<T>(source, nranks, tokens, hidden);
        let before = recv_expert.len();
        for (t, &e) in input.experts.iter().enumerate() {
            if (e / EXPERTS_PER_RANK) as usize == me {
                recv.extend(input.x[t * hidden..(t + 1) * hidden].iter().map(|v| v.value()));
                recv_expert.push(e);
            }
        }
        from_each.push(recv_expert.len() - before);
        if source == me {
            for (t, &e) in input.experts.iter().enumerate() {
                let scale = f64::from(input.gate[t]) * f64::from(e + 1);
                out.extend(input.x[t * hidden..(t + 1) * hidden].iter().map(|v| v.value() * scale));
            }
        }
    }
    Reference { recv, recv_expert, from_each, out }
}

struct Case {
    dtype: &'static str,
    tokens: usize,
    hidden: usize,
    element_bytes: usize,
    from_each: Vec<usize>,
    /// Median µs of dispatch + expert + combine: fused, unfused.
    times: [f64; 2],
    /// Relative errors of (received tokens, combined output): fused, unfused. Infinite when the count or the
    /// expert ids of the received tokens are wrong.
    errors: [(f64, f64); 2],
    tolerance: f64,
}

impl Case {
    fn passed(&self) -> bool {
        self.errors.iter().all(|(a, b)| *a < self.tolerance && *b < self.tolerance)
    }
}

fn run() -> Result<()> {
    let ranks = common::Ranks::from_env()?;
    let nranks = ranks.nranks();
    if nranks > 64 {
        return Err("this example handles at most 64 ranks".into());
    }
    println!("{nranks} rank(s), {} experts per rank", EXPERTS_PER_RANK);
    let reports = ranks.run(&Config::new(), |comm| {
        let rank = Rank::new(comm)?;
        let mut cases = Vec::new();
        for &(tokens, hidden) in SHAPES {
            cases.push(rank.case::<f32>(tokens, hidden)?);
            cases.push(rank.case::<half::bf16>(tokens, hidden)?);
        }
        Ok(cases)
    })?;

    let first = ranks.first_rank();
    println!(
        "\n{nranks} rank(s); rank {first}'s median times in µs of dispatch + expert + combine (every rank is checked)\n"
    );
    println!(
        "{:>5} {:>12} {:>8} | {:>9} {:>9} {:>7} | {:>9} {:>9} {:>9} {:>9} | rank 0 receives from each rank",
        "type", "tokens x hid", "per rank", "fused", "unfused", "speedup", "err recv", "err out", "unf recv", "unf out"
    );
    for (c, case) in reports[0].iter().enumerate() {
        let worst = |k: usize, second: bool| {
            common::worst(reports.iter().map(|r| if second { r[c].errors[k].1 } else { r[c].errors[k].0 }))
        };
        println!(
            "{:>5} {:>12} {:>8} | {:>9.1} {:>9.1} {:>6.2}x | {:>9.1e} {:>9.1e} {:>9.1e} {:>9.1e} | {:?}",
            case.dtype,
            format!("{}x{}", case.tokens, case.hidden),
            common::bytes(case.tokens * case.hidden * case.element_bytes),
            case.times[0],
            case.times[1],
            case.times[1] / case.times[0],
            worst(0, false),
            worst(0, true),
            worst(1, false),
            worst(1, true),
            case.from_each,
        );
    }
    let failed: Vec<String> = reports
        .iter()
        .enumerate()
        .flat_map(|(index, cases)| {
            let rank = first + index;
            cases.iter().filter(|c| !c.passed()).map(move |c| {
                format!(
                    "rank {rank} {} {}x{}: (received, combined) errors fused {:?}, unfused {:?} (limit {})",
                    c.dtype, c.tokens, c.hidden, c.errors[0], c.errors[1], c.tolerance
                )
            })
        })
        .collect();
    common::verdict(&failed, "received tokens exact, f32 < 1e-5, bf16 < 1e-2")
}

struct Rank<'comm> {
    comm: &'comm Communicator,
    stream: Arc<CudaStream>,
    stopwatch: common::Stopwatch,
    /// One full wave of dispatch, expert, combine (all `BLOCK` threads), per type (f32, bf16), and of the
    /// baseline's pack/unpack.
    waves: [[LaunchConfig; 3]; 2],
    baseline_waves: [LaunchConfig; 2],
    baseline: BaselineKernels,
    dev: DevComm<'comm, Lsa>,
}

/// One full wave of dispatch, expert and combine for element type `T`, on this rank's share of its GPU.
fn waves<T: Real>(comm: &Communicator, stream: &Arc<CudaStream>) -> std::result::Result<[LaunchConfig; 3], Error> {
    Ok([
        moe_dispatch::one_wave::<T>(comm, stream, BLOCK)?,
        moe_toy_expert::one_wave::<T>(comm, stream, BLOCK)?,
        moe_combine::one_wave::<T>(comm, stream, BLOCK)?,
    ])
}

impl<'comm> Rank<'comm> {
    fn new(comm: &'comm Communicator) -> std::result::Result<Self, Error> {
        common::require_one_lsa_team(comm, "this example")?;
        let stream = comm.context().new_stream()?;
        let baseline = BaselineKernels::load(comm.context())?;
        let waves = [waves::<f32>(comm, &stream)?, waves::<half::bf16>(comm, &stream)?];
        let mut requirements = moe_route::requirements(&LaunchConfig::linear(1, ROUTE_BLOCK));
        for row in &waves {
            requirements =
                requirements.merge(&moe_dispatch::requirements(&row[0])).merge(&moe_combine::requirements(&row[2]));
        }
        let baseline_waves = baseline.waves(comm, &stream, BLOCK)?;
        // Every kernel this rank launches is loaded before the device communicator's creation lines the ranks up:
        // on a shared GPU, loading a module at a first launch can wait for peers' kernels that wait for this rank
        // (docs/multi-rank.md, "Load before launch"). one_wave loaded the others.
        moe_route::function(comm.context())?;
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&requirements)?;
        Ok(Rank {
            comm,
            stopwatch: common::Stopwatch::new(comm.context())?,
            stream,
            waves,
            baseline_waves,
            baseline,
            dev,
        })
    }

    fn case<T: Real>(&self, tokens: usize, hidden: usize) -> std::result::Result<Case, Error> {
        let (comm, stream) = (self.comm, &self.stream);
        let (nranks, rank) = (comm.nranks(), comm.rank());
        let capacity = nranks * tokens;
        let which = usize::from(common::type_name::<T>() == "bf16");
        let want = reference::<T>(rank, nranks, tokens, hidden);
        let input = inputs::<T>(rank, nranks, tokens, hidden);

        // Shared inputs: the tokens and their experts live in windows (the fused kernels read peers' copies; the
        // baseline reads its own as plain memory).
        let mut x = comm.alloc_window::<T>(stream, tokens * hidden, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&input.x)?;
        let mut experts = comm.alloc_window::<u32>(stream, tokens, WindowFlags::COLL_SYMMETRIC)?;
        experts.buffer_mut().copy_from_host(&input.experts)?;
        let gate = stream.clone_htod(&input.gate)?;
        let experts_local = stream.clone_htod(&input.experts)?;

        let mut fused = Fused::new(comm, stream, &self.dev, self.waves[which], capacity, tokens, hidden)?;
        fused.run(&x, &experts, &experts_local, &gate)?;
        weft::host::cuda::settle(stream)?;
        let fused_errors = fused.errors(stream, &want)?;

        let mut baseline = Unfused::new(
            comm,
            stream,
            &self.baseline,
            which,
            self.baseline_waves[which],
            self.waves[which][1],
            capacity,
            tokens,
            hidden,
        )?;
        baseline.run(&x, &experts, &gate)?;
        weft::host::cuda::settle(stream)?;
        let unfused_errors = baseline.errors(stream, &want)?;

        let times = common::time_variants(&self.stopwatch, stream, WARMUP, ITERATIONS, 2, |variant| match variant {
            0 => fused.run(&x, &experts, &experts_local, &gate),
            _ => baseline.run(&x, &experts, &gate),
        })?;
        weft::host::cuda::settle(stream)?;
        Ok(Case {
            dtype: common::type_name::<T>(),
            tokens,
            hidden,
            element_bytes: std::mem::size_of::<T>(),
            from_each: want.from_each,
            times: [times[0], times[1]],
            errors: [fused_errors, unfused_errors],
            tolerance: T::TOLERANCE,
        })
    }
}

/// Compares received tokens, their ids and count, and the combined output with the reference.
fn check<T: Real>(
    stream: &Arc<CudaStream>,
    want: &Reference,
    hidden: usize,
    recv: &CudaSlice<T>,
    recv_expert: &CudaSlice<u32>,
    recv_total: &CudaSlice<u32>,
    out: &CudaSlice<T>,
) -> std::result::Result<(f64, f64), Error> {
    let total = want.recv_expert.len();
    let got_total = weft::host::cuda::download(stream, recv_total)?[0] as usize;
    let ids = weft::host::cuda::download(stream, recv_expert)?;
    let received = if got_total != total || ids[..total] != want.recv_expert[..] {
        f64::INFINITY
    } else if total == 0 {
        0.0
    } else {
        common::relative_error(&weft::host::cuda::download(stream, recv)?[..total * hidden], &want.recv)
    };
    Ok((received, common::relative_error(&weft::host::cuda::download(stream, out)?, &want.out)))
}

/// The fused path's buffers: windows peers read (`order`, `meta`, `y`) and this rank's outputs.
struct Fused<'a, T: Real> {
    stream: &'a Arc<CudaStream>,
    dev: &'a DevComm<'a, Lsa>,
    cfg: [LaunchConfig; 3],
    order: Window<'a, u32>,
    meta: Window<'a, u32>,
    y: Window<'a, T>,
    position: CudaSlice<u32>,
    recv: CudaSlice<T>,
    recv_expert: CudaSlice<u32>,
    recv_total: CudaSlice<u32>,
    out: CudaSlice<T>,
    tokens: usize,
    hidden: usize,
    capacity: usize,
}

impl<'a, T: Real> Fused<'a, T> {
    fn new(
        comm: &'a Communicator,
        stream: &'a Arc<CudaStream>,
        dev: &'a DevComm<'a, Lsa>,
        cfg: [LaunchConfig; 3],
        capacity: usize,
        tokens: usize,
        hidden: usize,
    ) -> std::result::Result<Self, Error> {
        let mut y = comm.alloc_window::<T>(stream, capacity * hidden, WindowFlags::COLL_SYMMETRIC)?;
        y.buffer_mut().copy_from_host(&vec![T::nan(); capacity * hidden])?;
        Ok(Fused {
            stream,
            dev,
            cfg,
            order: comm.alloc_window::<u32>(stream, tokens, WindowFlags::COLL_SYMMETRIC)?,
            meta: comm.alloc_window::<u32>(stream, 2 * comm.nranks(), WindowFlags::COLL_SYMMETRIC)?,
            y,
            position: stream.clone_htod(&vec![u32::MAX; tokens])?,
            recv: stream.clone_htod(&vec![T::nan(); capacity * hidden])?,
            recv_expert: stream.clone_htod(&vec![u32::MAX; capacity])?,
            recv_total: stream.clone_htod(&[u32::MAX])?,
            out: stream.clone_htod(&vec![T::nan(); tokens * hidden])?,
            tokens,
            hidden,
            capacity,
        })
    }

    /// Route, dispatch, expert, combine: four launches, no host synchronisation.
    fn run(
        &mut self,
        x: &Window<'_, T>,
        experts: &Window<'_, u32>,
        experts_local: &CudaSlice<u32>,
        gate: &CudaSlice<f32>,
    ) -> std::result::Result<(), Error> {
        let (stream, dev) = (self.stream, self.dev);
        let route_cfg = LaunchConfig::linear(1, ROUTE_BLOCK);
        moe_route::launch(
            stream,
            route_cfg,
            dev,
            experts,
            &self.order,
            &self.meta,
            &mut self.position,
            self.tokens,
            EXPERTS_PER_RANK,
        )?;
        moe_dispatch::launch(
            stream,
            self.cfg[0],
            dev,
            x,
            experts,
            &self.order,
            &self.meta,
            &mut self.recv,
            &mut self.recv_expert,
            &mut self.recv_total,
            self.hidden,
            self.capacity,
        )?;
        moe_toy_expert::launch(
            stream,
            self.cfg[1],
            &self.recv,
            &self.recv_expert,
            &self.recv_total,
            &mut self.y.buffer_mut(),
            self.hidden,
        )?;
        moe_combine::launch(
            stream,
            self.cfg[2],
            dev,
            &self.y,
            &self.meta,
            experts_local,
            &self.position,
            gate,
            &mut self.out,
            self.tokens,
            self.hidden,
            EXPERTS_PER_RANK,
        )
    }

    fn errors(&self, stream: &Arc<CudaStream>, want: &Reference) -> std::result::Result<(f64, f64), Error> {
        check(stream, want, self.hidden, &self.recv, &self.recv_expert, &self.recv_total, &self.out)
    }
}
