//! GPU tests of programmatic dependent launch (PDL: `LaunchConfig::programmatic()`, `pdl_wait()`,
//! `pdl_launch_dependents()`), one rank: a consumer launched programmatically after its producer reads the
//! producer's output only after `pdl_wait()` (200 pairs back to back, each checked), and a chain of small kernels
//! launched with and without PDL, timed (both sides in one process, same GPU; the figures go to bench/RESULTS.md).

use weft_kit::kernels::allreduce_epilogue::allreduce_bias_residual_one_shot as one_shot;
use weft_kit::test_kernels::{pdl_consumer, pdl_fill, pdl_producer};

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use weft::host::caps::Lsa;
use weft::host::launch::CudaStream;
use weft::host::{Communicator, Config, DeviceBuffer, LaunchConfig, UniqueId, Window, WindowFlags};
use weft_kit::spin::{spin, SPIN};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

/// Each consumer sees its own producer's value: `pdl_wait()` orders the read after the producer's writes, even though
/// the consumer may start before the producer ends.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_programmatic_consumer_sees_its_producers_writes() {
    const PAIRS: u32 = 200;
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let n = 1 << 20;
    let cfg = pdl_producer::one_wave(&comm, &s, 256).unwrap();
    let mut stage = DeviceBuffer::<u32>::new(&s, n).unwrap();
    let mut outs: Vec<DeviceBuffer<u32>> = (0..PAIRS).map(|_| DeviceBuffer::new(&s, n).unwrap()).collect();
    for (k, out) in outs.iter_mut().enumerate() {
        pdl_producer::launch(&s, cfg, &mut stage, k as u32, n).unwrap();
        pdl_consumer::launch(&s, cfg.programmatic(), &stage, out, n).unwrap();
    }
    for (k, out) in outs.iter().enumerate() {
        let got = out.copy_to_host().unwrap();
        let wrong = got.iter().filter(|&&v| v != k as u32 + 1).count();
        assert_eq!(wrong, 0, "pair {k}: {wrong} of {n} elements did not see the producer's value");
    }
    println!("{PAIRS} producer/consumer pairs back to back: every consumer saw its producer's writes");
}

/// Timed rounds per side (the median is reported).
const REPEATS: usize = 7;

/// GPU-side time of one chain of kernels without and with PDL: `REPEATS` rounds of each, alternating. A round runs
/// `prepare(state)` (host work), a spin kernel long enough to hold the whole chain behind it (so the host's launch
/// rate is not what is measured), `enqueue(state, programmatic)` between two CUDA events, waits, and
/// `check(state, programmatic)`. Returns the medians (without, with) in µs, divided by `per_chain`.
fn time_chains<S>(
    comm: &Communicator,
    s: &Arc<CudaStream>,
    per_chain: usize,
    state: &mut S,
    prepare: impl Fn(&mut S),
    enqueue: impl Fn(&mut S, bool),
    check: impl Fn(&S, bool),
) -> (f64, f64) {
    let spinner = weft::host::jit::function(comm.context(), &SPIN).unwrap();
    let (start, end) = (
        comm.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap(),
        comm.context().new_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).unwrap(),
    );
    let (mut plain, mut pdl) = (Vec::new(), Vec::new());
    for repeat in 0..REPEATS * 2 {
        let programmatic = repeat % 2 == 1;
        prepare(state);
        weft::host::cuda::settle(s).unwrap();
        // Long enough to enqueue the whole chain behind it (~5 µs per launch).
        spin(&spinner, s, 20_000_000).unwrap();
        start.record(s).unwrap();
        enqueue(state, programmatic);
        end.record(s).unwrap();
        weft::host::cuda::settle(s).unwrap();
        let us = f64::from(start.elapsed_ms(&end).unwrap()) * 1e3 / per_chain as f64;
        if programmatic {
            pdl.push(us)
        } else {
            plain.push(us)
        }
        check(state, programmatic);
    }
    plain.sort_by(f64::total_cmp);
    pdl.sort_by(f64::total_cmp);
    (plain[REPEATS / 2], pdl[REPEATS / 2])
}

/// A chain of `LENGTH` small dependent kernels (producer, then consumers each reading the previous output), launched
/// without and with PDL, alternating: GPU-side µs per kernel between two CUDA events, the whole chain enqueued
/// behind a spin kernel first (so the host's launch rate is not what is measured).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_chain_of_small_kernels_with_and_without_programmatic_launches() {
    const LENGTH: usize = 200;
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    for n in [1024usize, 64 * 1024] {
        let cfg = LaunchConfig::linear(n.div_ceil(256).min(132) as u32, 256);
        let mut buffers: Vec<DeviceBuffer<u32>> = (0..2).map(|_| DeviceBuffer::new(&s, n).unwrap()).collect();
        let enqueue = |buffers: &mut Vec<DeviceBuffer<u32>>, programmatic: bool| {
            let (first, rest) = buffers.split_at_mut(1);
            pdl_producer::launch(&s, cfg, &mut first[0], 0, n).unwrap();
            for k in 0..LENGTH {
                let chained = if programmatic { cfg.programmatic() } else { cfg };
                if k % 2 == 0 {
                    pdl_consumer::launch(&s, chained, &first[0], &mut rest[0], n).unwrap();
                } else {
                    pdl_consumer::launch(&s, chained, &rest[0], &mut first[0], n).unwrap();
                }
            }
        };
        let check = |buffers: &Vec<DeviceBuffer<u32>>, programmatic: bool| {
            // After LENGTH increments, the last buffer written holds LENGTH everywhere.
            let last = if LENGTH % 2 == 1 { &buffers[1] } else { &buffers[0] };
            let got = last.copy_to_host().unwrap();
            assert!(got.iter().all(|&v| v == LENGTH as u32), "the chain's result is wrong (PDL {programmatic})");
        };
        let (plain, pdl) = time_chains(&comm, &s, LENGTH + 1, &mut buffers, |_| {}, enqueue, check);
        println!(
            "chain of {LENGTH} dependent kernels, {} KB each: {plain:.2} us per kernel without PDL, {pdl:.2} with, \
             without / with {:.2}x (GPU time between events, median of {REPEATS})",
            n * 4 / 1024,
            plain / pdl
        );
    }
}

/// A fused kernel after the kernel that writes its input, as a tensor-parallel layer runs it (the GEMM, then the
/// all-reduce + bias + residual of its output): `LENGTH` pairs of `pdl_fill` (writes `x`) and the one-shot
/// all-reduce + bias + residual (reads `x`, writes `out`), back to back, each launched without and then with PDL
/// (every kernel of the chain programmatic: the fill also waits, for the previous all-reduce still reading `x`).
/// GPU-side µs per pair between two CUDA events, behind a spin kernel; the last pair's `out` is checked against the
/// host. One rank (weft refuses programmatic launches of communicating kernels on a GPU shared by ranks).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_fused_allreduce_after_its_producer_with_and_without_programmatic_launches() {
    const LENGTH: usize = 100;
    const HIDDEN: usize = 1024;
    let comm = one_rank();
    let s = comm.context().new_stream().unwrap();
    let cfg = one_shot::one_wave::<f32>(&comm, &s, 256).unwrap();
    let fill_cfg = pdl_fill::one_wave::<f32>(&comm, &s, 256).unwrap();
    let dev = comm.dev_comm::<Lsa>(&one_shot::requirements(&cfg)).unwrap();
    for n in [4 * 1024usize, 64 * 1024, 1024 * 1024] {
        let x = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC).unwrap();
        let bias_host: Vec<f32> = (0..HIDDEN).map(|c| (c % 5) as f32 * 0.25).collect();
        let residual_host: Vec<f32> = (0..n).map(|i| (i % 11) as f32 * 0.5).collect();
        let bias = DeviceBuffer::from_host(&s, &bias_host).unwrap();
        let residual = DeviceBuffer::from_host(&s, &residual_host).unwrap();
        let out = DeviceBuffer::<f32>::new(&s, n).unwrap();
        let prepare = |(_, out): &mut (Window<'_, f32>, DeviceBuffer<f32>)| {
            out.copy_from_host(&vec![f32::NAN; n]).unwrap();
        };
        let enqueue = |(x, out): &mut (Window<'_, f32>, DeviceBuffer<f32>), programmatic: bool| {
            let (fill_at, reduce_at) =
                if programmatic { (fill_cfg.programmatic(), cfg.programmatic()) } else { (fill_cfg, cfg) };
            for k in 0..LENGTH {
                pdl_fill::launch(&s, fill_at, &mut x.buffer_mut(), k as f32, n).unwrap();
                one_shot::launch(&s, reduce_at, &dev, &*x, &bias, &residual, out, n, HIDDEN).unwrap();
            }
        };
        let check = |(_, out): &(Window<'_, f32>, DeviceBuffer<f32>), programmatic: bool| {
            // One rank: out = x of the last pair + bias + residual, exactly (small integers and quarters).
            let got = out.copy_to_host().unwrap();
            let last = (LENGTH - 1) as f32;
            let wrong =
                (0..n).filter(|&i| got[i] != last + (i % 7) as f32 + bias_host[i % HIDDEN] + residual_host[i]).count();
            assert_eq!(wrong, 0, "{wrong} of {n} outputs wrong after the chain (PDL {programmatic})");
        };
        let (plain, pdl) = time_chains(&comm, &s, LENGTH, &mut (x, out), prepare, enqueue, check);
        println!(
            "fill + fused all-reduce + bias + residual, {} KB f32, {LENGTH} pairs: {plain:.2} us per pair without PDL, \
             {pdl:.2} with, without / with {:.2}x (GPU time between events, median of {REPEATS})",
            n * 4 / 1024,
            plain / pdl
        );
    }
}
