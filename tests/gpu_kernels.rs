//! GPU tests of `#[weft::kernel]` kernels on one rank: LSA kernels against host references in f32 and bf16,
//! barrier round trips, the barrier timeout form (all members present, and a constructed member that never
//! arrives), the MoE routing step for any rank count, and a GIN kernel's clean refusal on an NVLink-only machine.

use weft_kit::kernels as example_kernels;
use weft_kit::test_kernels as kernels;

use example_kernels::allreduce::lsa_allreduce;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
use cudarc::driver::CudaStream;
use weft::host::caps::{Lsa, LsaGin};
use weft::host::jit::{self, KernelSpec};
use weft::host::launch::{launch_raw, ArgBuffer};
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, Placement, Requirements, UniqueId, WindowFlags};

/// With `WEFT_TRACE` set, prints what a rank is about to do (to find where a multi-rank run stops).
macro_rules! trace {
    ($($arg:tt)*) => {
        if std::env::var_os("WEFT_TRACE").is_some() {
            eprintln!($($arg)*);
        }
    };
}

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// ‖got − want‖ / ‖want‖ in f64; NaN never passes.
fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let (mut diff, mut norm) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        assert!(g.is_finite(), "non-finite output {g}");
        diff += (g - w) * (g - w);
        norm += w * w;
    }
    (diff / norm.max(f64::MIN_POSITIVE)).sqrt()
}

fn stream(comm: &Communicator) -> Arc<CudaStream> {
    comm.context().new_stream().unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lsa_allreduce_and_peer_copy_match_the_host_reference_in_f32_and_bf16() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = (1 << 20) + 3;
    let cfg = LaunchConfig::linear(132, 512);
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&lsa_allreduce::requirements(&cfg)).unwrap();
    assert!(dev.lsa_barriers() >= 132, "the requirements cover one barrier per block");

    // f32
    let x = random(n, 11);
    let mut window = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC).unwrap();
    window.buffer_mut().copy_from_host(&x).unwrap();
    let mut out = s.clone_htod(&vec![f32::NAN; n]).unwrap();
    lsa_allreduce::launch(&s, cfg, &dev, &window, &mut out, n).unwrap();
    let got: Vec<f64> = s.clone_dtoh(&out).unwrap().iter().map(|v| f64::from(*v)).collect();
    let want: Vec<f64> = x.iter().map(|v| f64::from(*v) * comm.nranks() as f64).collect();
    let err = relative_error(&got, &want);
    println!("lsa_allreduce f32: relative error {err:.3e}");
    assert!(err < 1e-6, "{err}");

    let mut copy = s.clone_htod(&vec![f32::NAN; n]).unwrap();
    kernels::copy_from_next_peer::launch(&s, cfg, &dev, &window, &mut copy, n).unwrap();
    assert_eq!(s.clone_dtoh(&copy).unwrap(), x);

    // bf16
    let xb: Vec<half::bf16> = random(n, 12).into_iter().map(half::bf16::from_f32).collect();
    let mut window_b = comm.alloc_window::<half::bf16>(&s, n, WindowFlags::COLL_SYMMETRIC).unwrap();
    window_b.buffer_mut().copy_from_host(&xb).unwrap();
    let mut out_b = s.clone_htod(&vec![half::bf16::NAN; n]).unwrap();
    lsa_allreduce::launch(&s, cfg, &dev, &window_b, &mut out_b, n).unwrap();
    let got: Vec<f64> = s.clone_dtoh(&out_b).unwrap().iter().map(|v| f64::from(v.to_f32())).collect();
    let want: Vec<f64> = xb.iter().map(|v| f64::from(v.to_f32()) * comm.nranks() as f64).collect();
    let err = relative_error(&got, &want);
    println!("lsa_allreduce bf16: relative error {err:.3e}");
    assert!(err < 1e-2, "{err}");

    // A kernel writing through a window's local view.
    kernels::fill_window::launch(&s, cfg, &window, 0.5, n).unwrap();
    s.synchronize().unwrap();
    let filled = window.buffer().copy_to_host().unwrap();
    assert!(filled.iter().enumerate().all(|(i, v)| *v == 0.5 * i as f32));

    // Run-time checks the types cannot make: a grid larger than the device communicator's barriers.
    let too_big = LaunchConfig::linear(1000, 128);
    let err = lsa_allreduce::launch(&s, too_big, &dev, &window, &mut out, n).unwrap_err();
    println!("grid check: {err}");
    assert!(matches!(err, Error::InvalidArgument { argument: "dev", .. }), "{err}");
    drop(dev);
    drop((window, window_b));
    comm.finalize().unwrap().destroy().unwrap();
}

/// The ranks the multi-rank tests run: `WEFT_RANKS` spread over the visible GPUs, else one per GPU.
fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

/// The LSA kernels on every rank of the placement (`WEFT_RANKS`, else one per GPU; ranks sharing a GPU load and
/// store each other's windows through NCCL's LSA mappings too): the all-reduce sums every rank's window, the peer
/// copy reads the next rank's, barrier round trips complete on every block of every rank. Each kernel runs one wave
/// of its own, this rank's share of the GPU.
#[test]
#[ignore = "needs a CUDA GPU"]
fn lsa_kernels_match_the_host_reference_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    let n = (1 << 20) + 3;
    let inputs: Vec<Vec<f32>> = (0..nranks).map(|r| random(n, 40 + r as u64)).collect();
    let sum: Vec<f64> = (0..n).map(|i| inputs.iter().map(|x| f64::from(x[i])).sum()).collect();
    let results = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        assert_eq!(comm.nranks(), nranks);
        trace!("rank {me}: waves");
        // Each kernel's own wave: this rank's share of the GPU.
        let reduce_cfg = lsa_allreduce::one_wave::<f32>(comm, &s, 512)?;
        let copy_cfg = kernels::copy_from_next_peer::one_wave::<f32>(comm, &s, 512)?;
        let trips_cfg = kernels::barrier_round_trips::one_wave(comm, &s, 512)?;
        let needs = lsa_allreduce::requirements(&reduce_cfg)
            .merge(&kernels::copy_from_next_peer::requirements(&copy_cfg))
            .merge(&kernels::barrier_round_trips::requirements(&trips_cfg));
        trace!("rank {me}: dev_comm {reduce_cfg:?} {copy_cfg:?} {trips_cfg:?}");
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&needs)?;
        trace!("rank {me}: window");
        let mut window = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        window.buffer_mut().copy_from_host(&inputs[me])?;
        let mut out = s.clone_htod(&vec![f32::NAN; n])?;
        trace!("rank {me}: all-reduce");
        lsa_allreduce::launch(&s, reduce_cfg, &dev, &window, &mut out, n)?;
        let reduced: Vec<f64> = comm.download(&s, &out)?.iter().map(|v| f64::from(*v)).collect();
        let mut copy = s.clone_htod(&vec![f32::NAN; n])?;
        trace!("rank {me}: copy");
        kernels::copy_from_next_peer::launch(&s, copy_cfg, &dev, &window, &mut copy, n)?;
        let copied = comm.download(&s, &copy)?;
        let blocks = trips_cfg.grid_dim.0 as usize;
        let mut done = s.clone_htod(&vec![0u32; blocks])?;
        trace!("rank {me}: round trips");
        kernels::barrier_round_trips::launch(&s, trips_cfg, &dev, 100, &mut done)?;
        let rounds = comm.download(&s, &done)?;
        comm.wait(&s, weft::host::cuda::SETTLE_TIMEOUT)?;
        trace!("rank {me}: drop");
        drop((dev, window));
        trace!("rank {me}: done");
        Ok((me, reduced, copied, rounds))
    })
    .unwrap();
    for (me, reduced, copied, rounds) in results {
        let err = relative_error(&reduced, &sum);
        println!("rank {me} of {nranks}: lsa_allreduce relative error {err:.3e}");
        assert!(err < 1e-6, "rank {me}: {err}");
        assert!(copied == inputs[(me + 1) % nranks], "rank {me}: the copy is not rank {}'s window", (me + 1) % nranks);
        assert!(rounds.iter().all(|&r| r == 100), "rank {me}: {rounds:?}");
    }
}

/// 16-byte packs: aligned and unaligned sub-slices, a tail that does not fill a pack, f32 and bf16.
#[test]
#[ignore = "needs a CUDA GPU"]
fn pack_loads_and_stores_match_the_host_reference_at_any_offset() {
    fn check<T>(s: &Arc<CudaStream>, to: fn(f32) -> T, from: fn(T) -> f32, tolerance: f64)
    where
        T: weft::device::Float + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
        T: kernels::pack_axpy::Instantiated,
    {
        let lanes = weft::device::pack_lanes::<T>();
        let cfg = LaunchConfig::linear(64, 256);
        for (offset, n) in [(0, (1 << 16) + 5), (1, (1 << 16) + lanes), (3, 1000), (0, 9)] {
            let x: Vec<T> = random(n + offset, 21).into_iter().map(to).collect();
            let y: Vec<T> = random(n, 22).into_iter().map(to).collect();
            let a = 1.5f32;
            let (xd, yd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&y).unwrap());
            let mut out = s.clone_htod(&vec![to(f32::NAN); n]).unwrap();
            let mut squares = s.clone_htod(&vec![f32::NAN; n / lanes]).unwrap();
            kernels::pack_axpy::launch(s, cfg, a, &xd, offset, &yd, &mut out, &mut squares, n).unwrap();
            let want: Vec<f64> =
                (0..n).map(|i| f64::from(a) * f64::from(from(x[offset + i])) + f64::from(from(y[i]))).collect();
            let got: Vec<f64> = s.clone_dtoh(&out).unwrap().into_iter().map(|v| f64::from(from(v))).collect();
            let err = relative_error(&got, &want);
            let want_squares: Vec<f64> =
                want.chunks_exact(lanes).map(|pack| pack.iter().map(|v| v * v).sum::<f64>()).collect();
            let got_squares: Vec<f64> = s.clone_dtoh(&squares).unwrap().into_iter().map(f64::from).collect();
            let err_squares = relative_error(&got_squares, &want_squares);
            println!("pack_axpy {} offset {offset} n {n}: {err:.3e}, squares {err_squares:.3e}", T::NAME);
            assert!(err < tolerance && err_squares < 1e-5, "{err} {err_squares}");
        }
        // Sub-slices taken on the host at odd element offsets: the launch must pick the kernel's form for any
        // alignment (the aligned form would stop at the first 16-byte access with a misaligned-address fault).
        for offset in [1, 3] {
            let n = (1 << 12) + 3;
            let x: Vec<T> = random(n + offset, 24).into_iter().map(to).collect();
            let y: Vec<T> = random(n + offset, 25).into_iter().map(to).collect();
            let (xd, yd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&y).unwrap());
            let mut out = s.clone_htod(&vec![to(f32::NAN); n + offset]).unwrap();
            let mut squares = s.clone_htod(&vec![f32::NAN; n / lanes]).unwrap();
            let (xv, yv) = (xd.slice(offset..), yd.slice(offset..));
            kernels::pack_axpy::launch(s, cfg, 2.0, &xv, 0, &yv, &mut out.slice_mut(offset..), &mut squares, n)
                .unwrap();
            let want: Vec<f64> =
                (offset..offset + n).map(|i| 2.0 * f64::from(from(x[i])) + f64::from(from(y[i]))).collect();
            let got: Vec<f64> = s.clone_dtoh(&out).unwrap()[offset..].iter().map(|&v| f64::from(from(v))).collect();
            let err = relative_error(&got, &want);
            println!("pack_axpy {} host sub-slices at offset {offset}: {err:.3e}", T::NAME);
            assert!(err < tolerance, "{err}");
        }
    }
    let comm = one_rank();
    let s = stream(&comm);
    check::<f32>(&s, |v| v, |v| v, 1e-6);
    check::<half::bf16>(&s, half::bf16::from_f32, half::bf16::to_f32, 1e-2);

    // Window views: alignment follows the window offset.
    let n = 4096;
    let x: Vec<f32> = random(n + 8, 23);
    let mut window = comm.alloc_window::<f32>(&s, n + 8, WindowFlags::COLL_SYMMETRIC).unwrap();
    window.buffer_mut().copy_from_host(&x).unwrap();
    for offset in [0, 1, 3, 4] {
        let mut out = s.clone_htod(&vec![f32::NAN; n]).unwrap();
        kernels::pack_window_copy::launch(&s, LaunchConfig::linear(8, 128), &window, offset, &mut out, n).unwrap();
        assert_eq!(s.clone_dtoh(&out).unwrap(), x[offset..offset + n], "window offset {offset}");
    }
    drop(window);
}

/// `#[kernel(launch_bounds(128, 4))]`: 128-thread blocks run, 256-thread blocks are refused by weft, by name.
#[test]
#[ignore = "needs a CUDA GPU"]
fn launch_bounds_cap_the_block_size_with_a_typed_error() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 10_000;
    let mut out = s.clone_htod(&vec![0.0f32; n]).unwrap();
    kernels::bounded_fill::launch(&s, LaunchConfig::linear(16, 128), &mut out, 2.5, n).unwrap();
    assert!(s.clone_dtoh(&out).unwrap().iter().all(|&v| v == 2.5));
    let err = kernels::bounded_fill::launch(&s, LaunchConfig::linear(16, 256), &mut out, 1.0, n).unwrap_err();
    println!("launch bounds: {err}");
    assert!(matches!(err, Error::InvalidArgument { argument: "cfg", .. }), "{err}");
    assert!(err.to_string().contains("at most 128"), "{err}");
    // Nothing ran, and the stream is still usable.
    assert!(s.clone_dtoh(&out).unwrap().iter().all(|&v| v == 2.5));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn barrier_round_trips_complete_on_every_block() {
    let comm = one_rank();
    let s = stream(&comm);
    let cfg = LaunchConfig::linear(64, 128);
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_round_trips::requirements(&cfg)).unwrap();
    let mut done = s.clone_htod(&vec![0u32; 64]).unwrap();
    for _ in 0..3 {
        kernels::barrier_round_trips::launch(&s, cfg, &dev, 1000, &mut done).unwrap();
    }
    assert!(s.clone_dtoh(&done).unwrap().iter().all(|&c| c == 1000));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn barrier_timeout_form_returns_instead_of_hanging() {
    let comm = one_rank();
    let s = stream(&comm);
    let cfg = LaunchConfig::linear(4, 64);
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_wait_with_deadline::requirements(&cfg)).unwrap();
    let mut outcome = s.clone_htod(&vec![u32::MAX; 4]).unwrap();
    // With every member present the barrier completes well inside a generous deadline.
    kernels::barrier_wait_with_deadline::launch(&s, cfg, &dev, 1_000_000_000, &mut outcome).unwrap();
    assert_eq!(s.clone_dtoh(&outcome).unwrap(), vec![0; 4]);
}

/// The timeout form when a member never arrives, constructed on one GPU: a barrier whose team claims a second
/// member that does not exist (`tests/cuda/phantom_peer_wait.cu` says how and why it stays in bounds). Every block
/// must report "timed out" after its deadline instead of hanging, and the device communicator's barriers must still
/// complete afterwards.
#[test]
#[ignore = "needs a CUDA GPU"]
fn barrier_timeout_when_a_constructed_member_never_arrives() {
    const PHANTOM: KernelSpec = KernelSpec {
        name: "phantom_peer_wait",
        source: include_str!("cuda/phantom_peer_wait.cu"),
        entry_point: "phantom_peer_wait",
    };
    let comm = one_rank();
    let s = stream(&comm);
    let blocks = 4u32;
    let (cfg, round_trips) = (LaunchConfig::linear(blocks, 64), LaunchConfig::linear(blocks, 128));
    // The phantom's inbox slot of barrier `b` is word 3·n + 2·b + 1 of n barriers' 4·n: n > 2·blocks keeps it inside.
    let needs =
        Requirements::new().lsa_barriers(4 * blocks).merge(&kernels::barrier_round_trips::requirements(&round_trips));
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&needs).unwrap();
    let function = jit::function(comm.context(), &PHANTOM).unwrap();
    let mut outcome = s.clone_htod(&vec![u32::MAX; blocks as usize]).unwrap();
    let timeout_ns: u64 = 50_000_000;
    let started = Instant::now();
    {
        let mut args = ArgBuffer::new();
        args.push_bytes(dev.kernel_arg_bytes().unwrap(), DevComm::<Lsa>::KERNEL_ARG_ALIGN).unwrap();
        args.push(timeout_ns);
        args.push_slice_mut(&mut outcome, &s).unwrap();
        // SAFETY: phantom_peer_wait(ncclDevComm, unsigned long long, uint32_t*) gets the device communicator's
        // bytes, the deadline and `blocks` outcome words; it reads its own barrier resources within their buffer
        // (4·blocks barriers, see above) and writes only `outcome`; `dev` and `outcome` outlive the synchronization.
        unsafe { launch_raw(&function, &s, &cfg, &mut args).unwrap() };
        dev.note_launch(&s);
    }
    s.synchronize().unwrap();
    let elapsed = started.elapsed();
    let got = s.clone_dtoh(&outcome).unwrap();
    println!("member that never arrives: outcomes {got:?} after {elapsed:?}");
    assert!(got.iter().all(|&o| o == 1), "every block must time out: {got:?}");
    assert!(elapsed >= Duration::from_nanos(timeout_ns) && elapsed < Duration::from_secs(5), "{elapsed:?}");
    // Nothing was corrupted: the same barriers still complete round trips.
    let mut done = s.clone_htod(&vec![0u32; blocks as usize]).unwrap();
    kernels::barrier_round_trips::launch(&s, round_trips, &dev, 100, &mut done).unwrap();
    assert!(s.clone_dtoh(&done).unwrap().iter().all(|&c| c == 100));
}

/// The MoE examples' routing step for any rank count, on one GPU: `moe_route_counts`, the unfused baseline's kernel
/// (`benches/cuda/moe_dispatch_epilogue.cu`), takes the rank count as an argument, so 1 to 64 destinations run here;
/// the fused `moe_route` (kit/src/kernels/moe.rs) is the same algorithm over the LSA team's size. Tokens must be
/// grouped by destination stably (token order within a group); a token whose expert is on no rank keeps its slot.
#[test]
#[ignore = "needs a CUDA GPU"]
fn moe_routing_groups_tokens_stably_for_any_rank_count() {
    const ROUTE: KernelSpec = KernelSpec {
        name: "moe_dispatch_epilogue",
        source: include_str!("../benches/cuda/moe_dispatch_epilogue.cu"),
        entry_point: "moe_route_counts",
    };
    let comm = one_rank();
    let s = stream(&comm);
    let function = jit::function(comm.context(), &ROUTE).unwrap();
    let experts_per_rank = 2u32;
    for (nranks, tokens, block) in
        [(1u32, 40_000usize, 1024u32), (3, 1000, 1024), (8, 40_000, 1024), (8, 31, 96), (64, 5000, 1024), (5, 0, 64)]
    {
        // Random experts, one in 97 on no rank.
        let experts: Vec<u32> = random(tokens, u64::from(nranks) * 7 + tokens as u64)
            .iter()
            .enumerate()
            .map(|(t, v)| {
                if t % 97 == 5 {
                    2 * nranks + 1
                } else {
                    ((v + 1.0) * 0.5 * (2 * nranks) as f32) as u32 % (2 * nranks)
                }
            })
            .collect();
        let poison = u32::MAX;
        let experts_d = s.clone_htod(if tokens == 0 { &[0u32][..] } else { &experts }).unwrap(); // no empty buffers
        let mut counts = s.clone_htod(&vec![poison; nranks as usize]).unwrap();
        let mut offsets = s.clone_htod(&vec![poison; nranks as usize]).unwrap();
        let mut slot = s.clone_htod(&vec![poison; tokens.max(1)]).unwrap();
        {
            let mut args = ArgBuffer::new();
            let pointers = [
                args.slice_arg(&experts_d, &s).unwrap().ptr,
                args.slice_arg_mut(&mut counts, &s).unwrap().ptr,
                args.slice_arg_mut(&mut offsets, &s).unwrap().ptr,
                args.slice_arg_mut(&mut slot, &s).unwrap().ptr,
            ];
            pointers.into_iter().for_each(|p| args.push(p));
            args.push(tokens);
            args.push(experts_per_rank);
            args.push(nranks);
            // SAFETY: moe_route_counts(const uint32_t* experts, uint32_t* counts, uint32_t* offsets, uint32_t* slot,
            // size_t tokens, uint32_t experts_per_rank, uint32_t nranks), one block of a multiple of 32 threads:
            // experts and slot hold at least `tokens` entries, counts and offsets `nranks` (≤ 64); `args` borrows
            // every buffer until after the launch.
            unsafe { launch_raw(&function, &s, &LaunchConfig::linear(1, block), &mut args).unwrap() };
        }
        let (got_counts, got_offsets, got_slot) =
            (s.clone_dtoh(&counts).unwrap(), s.clone_dtoh(&offsets).unwrap(), s.clone_dtoh(&slot).unwrap());
        let dest: Vec<Option<usize>> = experts
            .iter()
            .map(|&e| (e / experts_per_rank < nranks).then_some((e / experts_per_rank) as usize))
            .collect();
        let mut want_counts = vec![0u32; nranks as usize];
        let mut want_slot = vec![poison; tokens.max(1)];
        for (slot, d) in want_slot.iter_mut().zip(&dest) {
            if let Some(d) = *d {
                *slot = want_counts[d]; // place in the group; the group's offset is added below
                want_counts[d] += 1;
            }
        }
        let want_offsets: Vec<u32> =
            want_counts.iter().scan(0u32, |acc, &c| Some(std::mem::replace(acc, *acc + c))).collect();
        for (slot, d) in want_slot.iter_mut().zip(&dest) {
            if let Some(d) = *d {
                *slot += want_offsets[d];
            }
        }
        let case = format!("{nranks} ranks, {tokens} tokens, {block} threads");
        assert_eq!(got_counts, want_counts, "counts, {case}");
        assert_eq!(got_offsets, want_offsets, "offsets, {case}");
        assert_eq!(got_slot, want_slot, "slots, {case}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_gin_kernel_compiles_and_its_dev_comm_request_fails_cleanly() {
    let comm = one_rank();
    // The kernel's source is real CUDA C++ for NCCL's GIN API; the codegen test compiles it with nvcc.
    assert!(kernels::gin_ring_put::SOURCE.contains("gin"));
    const { assert!(kernels::gin_ring_put::CAPABILITIES.gin) };
    let request = comm.dev_comm::<LsaGin>(&kernels::gin_ring_put::requirements(&LaunchConfig::linear(1, 32)));
    match request {
        // A GIN backend here (weft's loopback, docs/gin.md): there is no refusal to see; tests/gpu_gin.rs runs GIN.
        Ok(_) => println!("skipped the refusal: this communicator has GIN ({})", comm.properties().unwrap()),
        Err(err) => {
            println!("GIN DevComm request: {err}");
            assert!(matches!(err, Error::MissingCapability { capability: "GIN", .. }), "{err}");
        }
    }
}

/// A real peer that never arrives at a device barrier: rank 0 launches nothing, every other rank's bounded wait must
/// end with "timed out" instead of hanging. Needs two or more ranks (`WEFT_RANKS=2` on one GPU will do).
#[test]
#[ignore = "needs a CUDA GPU"]
fn barrier_timeout_when_a_peer_never_arrives_on_every_rank() {
    let placement = placement();
    if placement.nranks() < 2 {
        println!("skipped: needs 2 or more ranks, the placement has 1 (run with WEFT_RANKS=2 or on 2 GPUs)");
        return;
    }
    let outcomes = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(1, 32);
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_wait_with_deadline::requirements(&cfg))?;
        let mut outcome = s.clone_htod(&[u32::MAX])?;
        // Rank 0 never arrives: every other rank's bounded wait must end with "timed out", not hang.
        if comm.rank() != 0 {
            kernels::barrier_wait_with_deadline::launch(&s, cfg, &dev, 200_000_000, &mut outcome)?;
        }
        comm.wait(&s, weft::host::cuda::SETTLE_TIMEOUT)?;
        Ok(comm.download(&s, &outcome)?[0])
    })
    .unwrap();
    assert_eq!(outcomes[0], u32::MAX);
    assert!(outcomes[1..].iter().all(|&o| o == 1), "{outcomes:?}");
}

/// Ranks sharing a GPU get their share of it, and a launch larger than the share is refused with a typed error, not
/// a hang: one rank that says it shares its GPU with another (NCCL ≥ 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1 lets it
/// say so; on an older NCCL the claim itself must be refused with the error that names both).
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_launch_larger_than_the_ranks_share_of_a_shared_gpu_is_refused() {
    let claim = Communicator::uninit(0).unwrap().sharing_gpu(2).unwrap();
    let version = weft::host::sys::library().unwrap().version();
    let comm = match claim.init(1, 0, &UniqueId::new().unwrap(), &Config::new()) {
        Ok(comm) => comm,
        Err(error) => {
            println!("NCCL {version}: {error}");
            assert!(matches!(error, Error::GpuSharing { ranks: 2, device: 0, .. }), "{error}");
            return;
        }
    };
    assert_eq!(comm.ranks_on_gpu(), 2);
    let s = stream(&comm);
    let function = kernels::barrier_round_trips::function(comm.context()).unwrap();
    let whole = LaunchConfig::one_wave(&function, &s, 256).unwrap();
    let share = comm.one_wave(&function, &s, 256).unwrap();
    println!("whole GPU {} blocks, this rank's share {}", whole.grid_dim.0, share.grid_dim.0);
    // Half of what is left once the multiprocessors NCCL's CTAs could take are set aside.
    let sms = comm.context().attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).unwrap() as u64;
    let per_sm = u64::from(whole.grid_dim.0) / sms;
    assert_eq!(u64::from(share.grid_dim.0), weft::host::launch::shared_gpu_share(sms, per_sm, 2));
    assert!(share.grid_dim.0 < whole.grid_dim.0 / 2, "the share leaves room for NCCL's CTAs");
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_round_trips::requirements(&whole)).unwrap();
    let mut done = s.clone_htod(&vec![0u32; whole.grid_dim.0 as usize]).unwrap();
    let refused = kernels::barrier_round_trips::launch(&s, whole, &dev, 1, &mut done).unwrap_err();
    println!("{refused}");
    assert!(
        matches!(refused, Error::NotCoResident { ranks_on_gpu: 2, blocks, fits, .. } if blocks == u64::from(whole.grid_dim.0) && fits == u64::from(share.grid_dim.0)),
        "{refused}"
    );
    kernels::barrier_round_trips::launch(&s, share, &dev, 1, &mut done).unwrap();
    s.synchronize().unwrap();
    let done = s.clone_dtoh(&done).unwrap();
    assert!(done[..share.grid_dim.0 as usize].iter().all(|&d| d == 1), "the share's launch must run");
}
