//! GPU tests of the host runtime, one rank on one GPU, and (the tests named `…_on_every_rank`) every rank of the
//! placement `WEFT_RANKS` sets (several may share a GPU), else one rank per visible GPU. Run on a GPU machine with
//! `--include-ignored` (`scripts/gpu-check.sh` runs them at 1, 2, 4 and 8 ranks).

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream};
use weft_host::caps::{Gin, Lsa, LsaMultimem};
use weft_host::{
    spmd, Batch, Communicator, Config, DevComm, Error, MemStat, Placement, ReduceOp, Requirements, Scalar,
    SuspendFlags, UniqueId, Version, WindowFlags,
};

/// With `WEFT_TRACE` set, prints what a rank is about to do (to find where a multi-rank run stops).
macro_rules! trace {
    ($($arg:tt)*) => {
        if std::env::var_os("WEFT_TRACE").is_some() {
            eprintln!($($arg)*);
        }
    };
}

fn one_rank() -> Communicator {
    let id = UniqueId::new().expect("ncclGetUniqueId");
    Communicator::init_rank(0, 1, 0, &id, &Config::new().comm_name("weft-test")).expect("one-rank init")
}

fn stream(comm: &Communicator) -> Arc<CudaStream> {
    comm.context().new_stream().expect("stream")
}

/// Deterministic pseudo-random values in [-1, 1) (xorshift), different for every seed.
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

fn upload<T: cudarc::driver::DeviceRepr>(stream: &Arc<CudaStream>, host: &[T]) -> CudaSlice<T> {
    stream.clone_htod(host).expect("htod")
}

fn download<T: cudarc::driver::DeviceRepr + Default + Clone>(
    stream: &Arc<CudaStream>,
    device: &CudaSlice<T>,
) -> Vec<T> {
    stream.clone_dtoh(device).expect("dtoh")
}

const POISON: f32 = -12345.5;

fn poisoned(stream: &Arc<CudaStream>, len: usize) -> CudaSlice<f32> {
    upload(stream, &vec![POISON; len])
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn identity_and_properties() {
    let comm = one_rank();
    assert_eq!((comm.rank(), comm.nranks(), comm.cuda_device()), (0, 1, 0));
    let props = comm.properties().unwrap();
    println!("NCCL {}: {props}", comm.nccl_version());
    assert_eq!((props.rank, props.nranks, props.cuda_device, props.lsa_size, props.lsa_teams), (0, 1, 0, 1, 1));
    if comm.nccl_version().at_least(Version::new(2, 29, 0)) {
        assert_eq!(props.device_api_support, Some(true));
        assert!(props.gin_type.is_some());
    } else {
        // 2.28 cannot report these: unknown, never guessed.
        assert_eq!((props.device_api_support, props.gin_type, props.multimem_support), (None, None, None));
    }
    assert!(comm.async_error().is_ok());
    assert!(!comm.error_string(weft_host::ResultCode::InvalidUsage).is_empty());
    comm.finalize().unwrap().destroy().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn lifecycle_split_shrink_revoke_finalize_destroy_abort() {
    let comm = one_rank();
    let child = comm
        .split(Some(7), 0, Some(&Config::new().comm_name("child")))
        .unwrap()
        .expect("color 7 yields a communicator");
    assert_eq!((child.rank(), child.nranks()), (0, 1));
    assert!(comm.split(None, 0, None).unwrap().is_none(), "no color, no communicator");
    child.finalize().unwrap().destroy().unwrap();

    // One rank cannot exclude anyone; an empty exclusion list is NCCL's to accept or refuse (2.28.9 refuses it
    // with ncclInvalidArgument). Either way: a communicator or a clean error, nothing in between. Shrinking
    // away a real rank needs two or more GPUs.
    match comm.shrink(&[], None, false) {
        Ok(shrunk) => {
            assert_eq!(shrunk.nranks(), 1);
            shrunk.abort().unwrap();
        }
        Err(error) => {
            println!("shrink excluding nobody: {error}");
            assert!(matches!(error, Error::Nccl { call: "ncclCommShrink", .. }), "{error}");
        }
    }

    // Invalid shrink lists are refused before NCCL sees them.
    assert!(matches!(comm.shrink(&[0], None, false), Err(Error::InvalidArgument { argument: "exclude", .. })));
    assert!(matches!(comm.shrink(&[3], None, false), Err(Error::InvalidArgument { argument: "exclude", .. })));

    let revoked = comm.revoke().unwrap();
    revoked.destroy().unwrap();

    one_rank().abort().unwrap();
    let finalized = one_rank().finalize().unwrap();
    drop(finalized); // destroys, never blocks
    drop(one_rank()); // aborts, never blocks, never panics
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn calls_newer_than_the_library_are_unsupported_or_work() {
    let comm = one_rank();
    let version = comm.nccl_version();
    if version.at_least(Version::new(2, 29, 0)) {
        let total = comm.mem_stat(MemStat::Total).unwrap();
        println!("NCCL {version}: {total} bytes tracked");
        let suspended = comm.suspend(SuspendFlags::MEMORY).unwrap();
        assert_eq!(suspended.mem_stat(MemStat::Suspended).unwrap(), 1);
        let comm = suspended.resume().unwrap();
        comm.finalize().unwrap().destroy().unwrap();
    } else {
        let err = comm.mem_stat(MemStat::Total).unwrap_err();
        assert!(matches!(err, Error::Unsupported { call: "ncclCommMemStats", .. }), "{err}");
        assert!(matches!(comm.grow_id(), Err(Error::Unsupported { call: "ncclCommGetUniqueId", .. })));
        let failed = comm.suspend(SuspendFlags::MEMORY).unwrap_err();
        assert!(
            matches!(failed.error(), Error::Unsupported { call: "ncclCommSuspend", needs, found } if *needs == Version::new(2, 29, 0) && *found == version),
            "{failed}"
        );
        println!("NCCL {version}: {failed}");
        // The failed transition handed the communicator back: it is still usable, then abortable.
        let comm = failed.into_communicator();
        assert_eq!(comm.nranks(), 1);
        comm.abort().unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nonblocking_init_and_finalize_are_polled_to_completion() {
    let id = UniqueId::new().unwrap();
    let pending = Communicator::uninit_nonblocking(0).unwrap().init(1, 0, &id, &Config::new()).unwrap();
    let comm = pending.wait(Duration::from_secs(60)).unwrap();
    assert_eq!((comm.rank(), comm.nranks()), (0, 1));
    let child = comm.split(Some(1), 0, None).unwrap().wait(Duration::from_secs(60)).unwrap().expect("a child");
    assert_eq!(child.nranks(), 1);
    child.abort().unwrap();
    let finalized = comm.finalize().unwrap().wait(Duration::from_secs(60)).unwrap();
    finalized.destroy().unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn windows_and_device_communicators_with_lsa_barriers() {
    let comm = one_rank();
    let stream = stream(&comm);
    let mut window = comm.alloc_window::<f32>(&stream, 1 << 20, WindowFlags::COLL_SYMMETRIC).unwrap();
    let host = random(window.len(), 1);
    window.buffer_mut().copy_from_host(&host).unwrap();
    assert_eq!(window.buffer().copy_to_host().unwrap(), host);
    assert!(!window.raw().unwrap().is_null());
    {
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&Requirements::new().lsa_barriers(132)).unwrap();
        let bytes = dev.kernel_arg_bytes().unwrap();
        assert!(bytes.iter().any(|b| *b != 0), "NCCL filled the device communicator");
        assert_eq!(dev.requirements().lsa_barriers, 132);
        assert!(dev.requirements().covers(&Requirements::new().lsa_barriers(132)).is_ok());
        assert!(dev.requirements().covers(&Requirements::new().lsa_barriers(133)).is_err());
    }
    // Team requirements and host-side team queries.
    let lsa = comm.team_lsa().unwrap();
    assert_eq!((lsa.nranks(), lsa.rank()), (1, 0));
    assert_eq!(comm.team_world().unwrap().nranks(), 1);
    assert_eq!(comm.team_rank_to_world(lsa, 0).unwrap(), 0);
    assert!(comm.team_rank_to_world(lsa, 1).is_err());
    let with_team: DevComm<'_, Lsa> =
        comm.dev_comm(&Requirements::new().lsa_barriers(4).team(lsa, false).resource_buffer(4096, 256)).unwrap();
    assert!(with_team.resource_buffer(0).is_some());
    assert_eq!(with_team.team_multimem_handle(0), None, "no multimem was asked for");
    drop(with_team);

    // GIN on an NVLink-only, one-GPU machine: a clean error, never a crash or a half-made DevComm.
    let gin = comm.dev_comm::<Gin>(&Requirements::new().gin_signals(4));
    let gin_error = gin.expect_err("no GIN here");
    println!("GIN request: {gin_error}");
    assert!(matches!(gin_error, Error::MissingCapability { capability: "GIN", .. }), "{gin_error}");
    let multimem = comm.dev_comm::<LsaMultimem>(&Requirements::new()).expect_err("multimem is off");
    assert!(matches!(multimem, Error::MissingCapability { capability: "multimem", .. }), "{multimem}");

    // close_all_resources releases what is still registered, idempotently.
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&Requirements::new().lsa_barriers(1)).unwrap();
    assert!(comm.close_all_resources().is_empty());
    assert!(comm.close_all_resources().is_empty());
    assert!(matches!(dev.kernel_arg_bytes(), Err(Error::InvalidArgument { argument: "dev", .. })));
    assert!(matches!(window.raw(), Err(Error::InvalidArgument { argument: "window", .. })));
    drop(dev);
    drop(window);
    comm.finalize().unwrap().destroy().unwrap();
}

fn assert_close(name: &str, got: &[f32], want: &[f32]) {
    if let Some(problem) = mismatch(name, got, want) {
        panic!("{problem}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_collective_matches_a_host_reference() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 4099;
    let x = random(n, 7);
    let send = upload(&s, &x);

    for (op, name) in [(ReduceOp::Sum, "sum"), (ReduceOp::Max, "max"), (ReduceOp::Min, "min"), (ReduceOp::Avg, "avg")] {
        let mut recv = poisoned(&s, n);
        comm.all_reduce(&send, &mut recv, op, &s).unwrap();
        assert_close(&format!("all_reduce {name}"), &download(&s, &recv), &x);
    }
    let mut recv = poisoned(&s, n);
    comm.all_reduce(&send, &mut recv, ReduceOp::Prod, &s).unwrap();
    assert_close("all_reduce prod", &download(&s, &recv), &x);

    let mut inplace = upload(&s, &x);
    comm.all_reduce_in_place(&mut inplace, ReduceOp::Sum, &s).unwrap();
    assert_close("all_reduce in place", &download(&s, &inplace), &x);

    let mut recv = poisoned(&s, n);
    comm.broadcast(&send, &mut recv, 0, &s).unwrap();
    assert_close("broadcast", &download(&s, &recv), &x);
    let mut inplace = upload(&s, &x);
    comm.broadcast_in_place(&mut inplace, 0, &s).unwrap();
    assert_close("broadcast in place", &download(&s, &inplace), &x);

    let mut recv = poisoned(&s, n);
    comm.reduce(&send, &mut recv, ReduceOp::Sum, 0, &s).unwrap();
    assert_close("reduce", &download(&s, &recv), &x);

    let mut recv = poisoned(&s, n);
    comm.all_gather(&send, &mut recv, &s).unwrap();
    assert_close("all_gather", &download(&s, &recv), &x);

    let mut recv = poisoned(&s, n);
    comm.reduce_scatter(&send, &mut recv, ReduceOp::Sum, &s).unwrap();
    assert_close("reduce_scatter", &download(&s, &recv), &x);

    let mut inplace = upload(&s, &x);
    comm.all_gather_in_place(&mut inplace, &s).unwrap();
    assert_close("all_gather in place", &download(&s, &inplace), &x);
    let mut inplace = upload(&s, &x);
    comm.reduce_scatter_in_place(&mut inplace, ReduceOp::Sum, &s).unwrap();
    assert_close("reduce_scatter in place", &download(&s, &inplace), &x);

    let mut recv = poisoned(&s, n);
    comm.all_to_all(&send, &mut recv, &s).unwrap();
    assert_close("all_to_all", &download(&s, &recv), &x);

    let mut recv = poisoned(&s, n);
    comm.gather(&send, Some(&mut recv), 0, &s).unwrap();
    assert_close("gather", &download(&s, &recv), &x);

    let mut recv = poisoned(&s, n);
    comm.scatter(Some(&send), &mut recv, 0, &s).unwrap();
    assert_close("scatter", &download(&s, &recv), &x);

    // Send to and receive from oneself, paired in one group (a batch holds both buffers until it launched).
    let mut recv = poisoned(&s, n);
    let mut batch = Batch::new();
    batch.send(&comm, &send, 0, &s).unwrap();
    batch.recv(&comm, &mut recv, 0, &s).unwrap();
    batch.launch().unwrap();
    assert_close("send/recv", &download(&s, &recv), &x);

    // A pre-multiplied sum: every input scaled by 0.5 before the sum.
    let half = comm.pre_mul_sum::<f32>(Scalar::Host(0.5)).unwrap();
    let mut recv = poisoned(&s, n);
    comm.all_reduce(&send, &mut recv, ReduceOp::Custom(half.op()), &s).unwrap();
    let scaled: Vec<f32> = x.iter().map(|v| v * 0.5).collect();
    assert_close("pre_mul_sum", &download(&s, &recv), &scaled);
    drop(half);

    // Other element types go through the same path: integers exactly, bf16 and f64 by value.
    let ints: Vec<i32> = (0..n as i32).map(|i| i * 3 - 7).collect();
    let ints_dev = upload(&s, &ints);
    let mut ints_out = upload(&s, &vec![i32::MIN; n]);
    comm.all_reduce(&ints_dev, &mut ints_out, ReduceOp::Sum, &s).unwrap();
    assert_eq!(download(&s, &ints_out), ints);
    let bf: Vec<half::bf16> = x.iter().map(|v| half::bf16::from_f32(*v)).collect();
    let bf_dev = upload(&s, &bf);
    let mut bf_out = upload(&s, &vec![half::bf16::from_f32(POISON); n]);
    comm.all_reduce(&bf_dev, &mut bf_out, ReduceOp::Sum, &s).unwrap();
    assert_eq!(download(&s, &bf_out), bf);
    let doubles: Vec<f64> = x.iter().map(|v| f64::from(*v) * 1e300).collect();
    let d_dev = upload(&s, &doubles);
    let mut d_out = upload(&s, &vec![f64::NAN; n]);
    comm.all_gather(&d_dev, &mut d_out, &s).unwrap();
    assert_eq!(download(&s, &d_out), doubles);
    let bytes: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
    let b_dev = upload(&s, &bytes);
    let mut b_out = upload(&s, &vec![0u8; n]);
    comm.broadcast(&b_dev, &mut b_out, 0, &s).unwrap();
    assert_eq!(download(&s, &b_out), bytes);
    let f8: Vec<float8::F8E4M3> = x.iter().map(|v| float8::F8E4M3::from_f32(*v)).collect();
    let f8_dev = upload(&s, &f8);
    let mut f8_out = upload(&s, &vec![float8::F8E4M3::from_f32(0.0); n]);
    comm.all_reduce(&f8_dev, &mut f8_out, ReduceOp::Sum, &s).unwrap();
    assert_eq!(
        download(&s, &f8_out).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        f8.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
    );

    // Bad arguments are refused before NCCL sees them.
    let mut short = poisoned(&s, n - 1);
    let err = comm.all_reduce(&send, &mut short, ReduceOp::Sum, &s).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { argument: "recv", .. }), "{err}");
    let err = comm.broadcast(&send, &mut poisoned(&s, n), 1, &s).unwrap_err();
    assert!(err.to_string().contains("rank 1 is not below nranks 1"), "{err}");
    let err = comm.gather::<f32, CudaSlice<f32>>(&send, None, 0, &s).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { argument: "recv", .. }), "{err}");
    comm.finalize().unwrap().destroy().unwrap();
}

/// A reduction on the host, element by element.
type Combine = fn(f32, f32) -> f32;

/// The first mismatch between `got` and `want` (NaN, or off by more than 1e-6 relative, 1e-6 absolute below 1), as
/// a message.
fn mismatch(name: &str, got: &[f32], want: &[f32]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!("{name}: {} elements, want {}", got.len(), want.len()));
    }
    got.iter()
        .zip(want)
        .position(|(g, w)| g.is_nan() || (g - w).abs() > 1e-6 * w.abs().max(1.0))
        .map(|i| format!("{name}[{i}]: got {}, want {}", got[i], want[i]))
}

/// The ranks the multi-rank tests run: `WEFT_RANKS` spread over the visible GPUs, else one per GPU.
fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

/// Every collective on every rank of the placement (`WEFT_RANKS`, else one per GPU), through the SPMD helper,
/// against host references built from every rank's inputs: non-zero roots, in-place forms, all-to-all blocks, a
/// send/recv ring, a pre-multiplied sum. Every rank runs the whole sequence and only then compares, so a wrong
/// result fails the test instead of leaving peers waiting.
#[test]
#[ignore = "needs a CUDA GPU"]
fn every_collective_matches_a_host_reference_on_every_rank() {
    let placement = placement();
    let devices = placement.devices();
    let nranks = devices.len();
    let n = 4099;
    // Rank r's data: n·nranks values; the per-rank collectives send the first n.
    let inputs: Vec<Vec<f32>> = (0..nranks).map(|r| random(n * nranks, 100 + r as u64)).collect();
    let first = |r: usize| inputs[r][..n].to_vec();
    let block = |r: usize, b: usize| inputs[r][b * n..(b + 1) * n].to_vec();
    let across = |f: Combine, range: std::ops::Range<usize>| -> Vec<f32> {
        range.map(|i| (1..nranks).fold(inputs[0][i], |acc, r| f(acc, inputs[r][i]))).collect()
    };
    let sum = across(|a, b| a + b, 0..n);
    let last = nranks - 1;

    let failures = spmd(devices, &Config::new(), |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        let mut seen: Vec<(String, Vec<f32>, Vec<f32>)> = Vec::new();
        trace!("rank {me}: starting the collectives");
        trace!("rank {me}: uploads");
        let send = s.clone_htod(&inputs[me][..n])?;
        let send_all = s.clone_htod(&inputs[me])?;
        let poison = |len: usize| s.clone_htod(&vec![POISON; len]);

        let ops: [(ReduceOp<'_>, &str, Combine); 4] = [
            (ReduceOp::Sum, "sum", |a, b| a + b),
            (ReduceOp::Max, "max", f32::max),
            (ReduceOp::Min, "min", f32::min),
            (ReduceOp::Prod, "prod", |a, b| a * b),
        ];
        for (op, name, f) in ops {
            let mut recv = poison(n)?;
            trace!("rank {me}: all_reduce");
            comm.all_reduce(&send, &mut recv, op, &s)?;
            seen.push((format!("all_reduce {name}"), comm.download(&s, &recv)?, across(f, 0..n)));
        }
        let mut recv = poison(n)?;
        trace!("rank {me}: all_reduce");
        comm.all_reduce(&send, &mut recv, ReduceOp::Avg, &s)?;
        seen.push((
            "all_reduce avg".into(),
            comm.download(&s, &recv)?,
            sum.iter().map(|v| v / nranks as f32).collect(),
        ));
        let mut inplace = s.clone_htod(&inputs[me][..n])?;
        trace!("rank {me}: all_reduce_in_place");
        comm.all_reduce_in_place(&mut inplace, ReduceOp::Sum, &s)?;
        seen.push(("all_reduce in place".into(), comm.download(&s, &inplace)?, sum.clone()));

        for root in [0, last] {
            let mut recv = poison(n)?;
            trace!("rank {me}: broadcast");
            comm.broadcast(&send, &mut recv, root, &s)?;
            seen.push((format!("broadcast from {root}"), comm.download(&s, &recv)?, first(root)));
        }
        let mut inplace = s.clone_htod(&inputs[me][..n])?;
        trace!("rank {me}: broadcast_in_place");
        comm.broadcast_in_place(&mut inplace, last, &s)?;
        seen.push(("broadcast in place".into(), comm.download(&s, &inplace)?, first(last)));

        let mut recv = poison(n)?;
        trace!("rank {me}: reduce");
        comm.reduce(&send, &mut recv, ReduceOp::Sum, last, &s)?;
        if me == last {
            seen.push(("reduce".into(), comm.download(&s, &recv)?, sum.clone()));
        }

        let gathered: Vec<f32> = (0..nranks).flat_map(first).collect();
        let mut recv = poison(n * nranks)?;
        trace!("rank {me}: all_gather");
        comm.all_gather(&send, &mut recv, &s)?;
        seen.push(("all_gather".into(), comm.download(&s, &recv)?, gathered.clone()));
        let mut inplace = poison(n * nranks)?;
        s.memcpy_htod(&inputs[me][..n], &mut inplace.slice_mut(me * n..(me + 1) * n))?;
        trace!("rank {me}: all_gather_in_place");
        comm.all_gather_in_place(&mut inplace, &s)?;
        seen.push(("all_gather in place".into(), comm.download(&s, &inplace)?, gathered.clone()));

        let mine = across(|a, b| a + b, me * n..(me + 1) * n);
        let mut recv = poison(n)?;
        trace!("rank {me}: reduce_scatter");
        comm.reduce_scatter(&send_all, &mut recv, ReduceOp::Sum, &s)?;
        seen.push(("reduce_scatter".into(), comm.download(&s, &recv)?, mine.clone()));
        let mut inplace = s.clone_htod(&inputs[me])?;
        trace!("rank {me}: reduce_scatter_in_place");
        comm.reduce_scatter_in_place(&mut inplace, ReduceOp::Sum, &s)?;
        let got = comm.download(&s, &inplace)?[me * n..(me + 1) * n].to_vec();
        seen.push(("reduce_scatter in place".into(), got, mine));

        let mut recv = poison(n * nranks)?;
        trace!("rank {me}: all_to_all");
        comm.all_to_all(&send_all, &mut recv, &s)?;
        seen.push(("all_to_all".into(), comm.download(&s, &recv)?, (0..nranks).flat_map(|r| block(r, me)).collect()));

        let mut recv = poison(n * nranks)?;
        trace!("rank {me}: gather");
        comm.gather(&send, (me == last).then_some(&mut recv), last, &s)?;
        if me == last {
            seen.push(("gather".into(), comm.download(&s, &recv)?, gathered.clone()));
        }
        let mut recv = poison(n)?;
        trace!("rank {me}: scatter");
        comm.scatter((me == 0).then_some(&send_all), &mut recv, 0, &s)?;
        seen.push(("scatter".into(), comm.download(&s, &recv)?, block(0, me)));

        // A ring: send to the next rank, receive from the previous one, in one group.
        let (next, previous) = ((me + 1) % nranks, (me + nranks - 1) % nranks);
        let mut recv = poison(n)?;
        trace!("rank {me}: send/recv group");
        let mut batch = Batch::new();
        batch.send(comm, &send, next, &s)?;
        batch.recv(comm, &mut recv, previous, &s)?;
        batch.launch()?;
        seen.push(("send/recv ring".into(), comm.download(&s, &recv)?, first(previous)));

        let half = comm.pre_mul_sum::<f32>(Scalar::Host(0.5))?;
        let mut recv = poison(n)?;
        trace!("rank {me}: all_reduce");
        comm.all_reduce(&send, &mut recv, ReduceOp::Custom(half.op()), &s)?;
        seen.push(("pre_mul_sum".into(), comm.download(&s, &recv)?, sum.iter().map(|v| v * 0.5).collect()));
        drop(half);

        Ok(seen
            .iter()
            .filter_map(|(name, got, want)| mismatch(&format!("rank {me}: {name}"), got, want))
            .collect::<Vec<_>>())
    })
    .unwrap();
    let failures: Vec<String> = failures.into_iter().flatten().collect();
    println!("{nranks} rank(s): every collective checked");
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn spmd_runs_one_communicator_on_every_rank() {
    let placement = placement();
    let devices = placement.devices();
    let sums = spmd(devices, &Config::new(), |comm| {
        assert_eq!(comm.ranks_on_gpu(), placement.ranks_on_gpu(comm.rank()));
        let s = comm.context().new_stream()?;
        let x = vec![(comm.rank() + 1) as f32; 1000];
        let send = s.clone_htod(&x)?;
        let mut recv = s.alloc_zeros::<f32>(1000)?;
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        Ok(comm.download(&s, &recv)?[0])
    })
    .unwrap();
    let n = devices.len() as f32;
    assert!(sums.iter().all(|&v| v == n * (n + 1.0) / 2.0), "{sums:?}");
}

/// Communicators split from one whose ranks weft knows (here `spmd`'s) know their own ranks in the process: on every
/// rank a split into even and odd ranks makes a child on which the ranks register a symmetric window and create a
/// device communicator (setup calls after which a child's ranks sharing a GPU line up: without their group a fast
/// rank could go on while a peer is still inside the call, docs/multi-rank.md) and all-reduce, under
/// `NCCL_LAUNCH_MODE=GROUP` through the child's own launch gate; the sums must be those of each half. A rank that
/// opts out of a second split gets no communicator, and the others' child works without it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn split_communicators_line_up_and_all_reduce_on_every_rank() {
    let placement = placement();
    let devices = placement.devices();
    let n = devices.len();
    let sums = spmd(devices, &Config::new(), |comm| {
        let rank = comm.rank();
        let config = weft_host::placement::shared_gpu_config(&Config::new(), comm.ranks_on_gpu());
        let half = comm.split(Some((rank % 2) as u32), rank as i32, Some(&config))?.expect("a color was given");
        let s = half.context().new_stream()?;
        let window = half.alloc_window::<f32>(&s, 1 << 16, WindowFlags::COLL_SYMMETRIC)?;
        let dev: DevComm<'_, Lsa> = half.dev_comm(&Requirements::new().lsa_barriers(4))?;
        let send = s.clone_htod(&vec![(rank + 1) as f32; 4096])?;
        let mut recv = s.alloc_zeros::<f32>(4096)?;
        half.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        let half_sum = half.download(&s, &recv)?;
        drop((dev, window));
        half.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
        // Rank 0 opts out; the others form one child.
        let rest = comm.split((rank != 0).then_some(7), rank as i32, Some(&config))?;
        let rest_sum = match rest {
            Some(rest) => {
                rest.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
                let sum = rest.download(&s, &recv)?;
                rest.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
                Some(sum)
            }
            None => None,
        };
        Ok((half_sum, rest_sum))
    })
    .unwrap();
    for (rank, (half_sum, rest_sum)) in sums.into_iter().enumerate() {
        // Ranks of one parity: rank + 1 summed over them.
        let half: f32 = (0..n).filter(|r| r % 2 == rank % 2).map(|r| (r + 1) as f32).sum();
        assert!(half_sum.iter().all(|&v| v == half), "rank {rank}: split sum {} instead of {half}", half_sum[0]);
        let rest = (2..=n).map(|r| r as f32).sum::<f32>();
        match rest_sum {
            Some(sum) => assert!(sum.iter().all(|&v| v == rest), "rank {rank}: {} instead of {rest}", sum[0]),
            None => assert_eq!(rank, 0, "only rank 0 opted out"),
        }
    }
    println!("{n} rank(s): both splits all-reduced their halves");
}

/// Free memory on CUDA device `device`, in bytes.
fn free_memory(device: usize) -> usize {
    weft_host::cuda::context(device).unwrap().bind_to_thread().unwrap();
    cudarc::driver::result::mem_get_info().unwrap().0
}

/// The NCCL ≥ 2.29 host features with real peers, on every rank of the placement: properties against what weft
/// reads through the calls 2.28 has too (rank, size, device, LSA team), suspend/resume with memory statistics and
/// the device's free memory before, during and after (is memory really released?), `put_signal` + `wait_signal`
/// around a ring, and the window's user pointer. On an older NCCL it says what it skipped.
#[test]
#[ignore = "needs a CUDA GPU"]
fn nccl_2_29_host_features_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    let version = weft_host::sys::library().unwrap().version();
    if !version.at_least(Version::new(2, 29, 0)) {
        println!("skipped: NCCL {version} has none of these calls (2.29+); their refusal is tested on one rank");
        return;
    }
    let n = 1 << 20;
    let inputs: Vec<Vec<f32>> = (0..nranks).map(|r| random(n, 700 + r as u64)).collect();
    let id = UniqueId::new().unwrap();
    let reports = on_every_rank(&placement, &id, |comm| {
        let (me, s) = (comm.rank(), comm.context().new_stream()?);
        let mut report = Vec::new();

        trace!("rank {me}: properties");
        // Properties: NCCL's view against weft's (identity calls, ncclTeamLsa).
        let props = comm.properties()?;
        let lsa = comm.team_lsa()?;
        assert_eq!((props.rank, props.nranks, props.cuda_device), (me, nranks, comm.cuda_device()));
        assert_eq!(props.lsa_size as i32, lsa.nranks(), "properties and ncclTeamLsa disagree");
        assert_eq!(props.lsa_teams, nranks / props.lsa_size, "NCCL's team count differs from weft's nranks / lsa");
        assert_eq!(props.device_api_support, Some(true));
        report.push(format!("properties: {props}"));

        trace!("rank {me}: suspend");
        // Suspend / resume: NCCL's statistics, and what the device says.
        let total = comm.mem_stat(MemStat::Total)?;
        let suspendable = comm.mem_stat(MemStat::Suspendable)?;
        let free_before = free_memory(comm.cuda_device());
        let suspended = comm.suspend(SuspendFlags::MEMORY).map_err(Error::from)?;
        assert_eq!(suspended.mem_stat(MemStat::Suspended)?, 1);
        let free_during = free_memory(suspended.cuda_device());
        let comm = suspended.resume().map_err(Error::from)?;
        assert_eq!(comm.mem_stat(MemStat::Suspended)?, 0);
        let free_after = free_memory(comm.cuda_device());
        report.push(format!(
            "memory: {total} B tracked, {suspendable} B suspendable; device free {} MB before, {} MB suspended, {} MB \
             resumed (other ranks suspend and resume meanwhile: the device view is shared)",
            free_before >> 20,
            free_during >> 20,
            free_after >> 20
        ));
        trace!("rank {me}: resumed");
        // The communicator works after resume.
        let send = s.clone_htod(&vec![1.0f32; 1024])?;
        let mut recv = s.alloc_zeros::<f32>(1024)?;
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        assert!(comm.download(&s, &recv)?.iter().all(|&v| v == nranks as f32), "all-reduce after resume");

        trace!("rank {me}: put_signal");
        // put_signal around a ring: rank r writes its input into rank r+1's window, which waits for the signal.
        let (next, previous) = ((me + 1) % nranks, (me + nranks - 1) % nranks);
        let window = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        assert_eq!(window.user_address()?, window.buffer().device_address(), "ncclWinGetUserPtr");
        // NCCL puts only from a symmetric window (2.30.7 refuses other memory): the source is one.
        let mut source = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        source.buffer_mut().copy_from_host(&inputs[me])?;
        let plain = comm.alloc_window::<f32>(&s, n, WindowFlags::DEFAULT)?;
        let refused = window.put_signal(&plain, 0, n, next, 0, 0, &s).unwrap_err();
        assert!(matches!(refused, Error::InvalidArgument { argument: "source", .. }), "{refused}");
        window.put_signal(&source, 0, n, next, 0, 0, &s)?;
        comm.wait_signal(previous, 0, 1, &s)?;
        trace!("rank {me}: wait_signal enqueued");
        let got = window.buffer().copy_to_host()?;
        trace!("rank {me}: put_signal done");
        let ok = got == inputs[previous];
        report.push(format!("put_signal ring: rank {previous}'s data {}", if ok { "arrived" } else { "is WRONG" }));
        assert!(ok, "rank {me}: the window does not hold rank {previous}'s data");
        comm.wait(&s, weft_host::cuda::SETTLE_TIMEOUT)?;
        drop((window, source, plain));
        comm.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
        Ok(report)
    });
    for (me, report) in reports.into_iter().enumerate() {
        for line in report.unwrap_or_else(|error| panic!("rank {me}: {error}")) {
            println!("rank {me}: {line}");
        }
    }
}

/// Runs `body` on one thread per rank of `placement`, each with its own communicator (which `body` owns: it may
/// suspend, finalize or abort it), told how many ranks share its GPU.
fn on_every_rank<R: Send>(
    placement: &Placement,
    id: &UniqueId,
    body: impl Fn(Communicator) -> Result<R, Error> + Sync,
) -> Vec<Result<R, Error>> {
    let groups = placement.local_groups();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..placement.nranks())
            .map(|rank| {
                let (body, group) = (&body, &groups[rank]);
                scope.spawn(move || {
                    let config = weft_host::placement::shared_gpu_config(&Config::new(), group.size());
                    let comm = Communicator::uninit(placement.devices()[rank])?.sharing_gpu_in(group)?.init(
                        placement.nranks(),
                        rank,
                        id,
                        &config,
                    )?;
                    body(comm)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a rank's thread panicked")).collect()
    })
}

/// Two ranks on one GPU: without NCCL ≥ 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1, `spmd` refuses with the error that
/// names both, before any communicator exists (NCCL's own refusal says neither). Where both are present the
/// multi-rank tests cover the placement, and this test says so.
#[test]
#[ignore = "needs a CUDA GPU"]
fn two_ranks_on_one_gpu_need_nccl_2_30_and_the_switch() {
    let version = weft_host::sys::library().unwrap().version();
    let allowed =
        version.at_least(weft_host::placement::MULTI_RANK_GPU_NCCL) && weft_host::placement::multi_rank_gpu_enabled();
    let outcome = spmd(&[0, 0], &Config::new(), |comm| Ok(comm.ranks_on_gpu()));
    match outcome {
        Ok(ranks) => {
            assert!(allowed, "NCCL {version} without the switch must not run two ranks on one GPU");
            assert_eq!(ranks, vec![2, 2]);
            println!("NCCL {version} with NCCL_MULTI_RANK_GPU_ENABLE=1: two ranks ran on GPU 0");
        }
        Err(error) => {
            println!("NCCL {version}: {error}");
            assert!(!allowed, "{error}");
            assert!(matches!(error, Error::GpuSharing { ranks: 2, device: 0, .. }), "{error}");
        }
    }
}

/// A communicator weft did not create (here: one weft made, seen through its raw handle as C code would hand it
/// over), adopted: an all-reduce works through it, and dropping the `Adopted` leaves the communicator to its owner,
/// which can still use and finalize it.
#[test]
#[ignore = "needs a CUDA GPU"]
fn an_adopted_communicator_works_and_stays_its_owner_s() {
    let owner = one_rank();
    let s = stream(&owner);
    {
        // SAFETY: `owner` is a live, blocking communicator of the libnccl weft loaded; nobody finalizes it while
        // `adopted` lives (it is dropped at the end of this block), and this thread is its only user.
        let adopted = unsafe { Communicator::adopt(owner.as_raw()) }.unwrap();
        assert_eq!((adopted.rank(), adopted.nranks(), adopted.cuda_device()), (0, 1, 0));
        let send = upload(&s, &[1.5f32; 64]);
        let mut recv = poisoned(&s, 64);
        adopted.all_reduce(&send, &mut recv, ReduceOp::Sum, &s).unwrap();
        assert_eq!(download(&s, &recv), vec![1.5f32; 64]);
    }
    // Still the owner's, and alive.
    let send = upload(&s, &[2.0f32; 64]);
    let mut recv = poisoned(&s, 64);
    owner.all_reduce(&send, &mut recv, ReduceOp::Sum, &s).unwrap();
    assert_eq!(download(&s, &recv), vec![2.0f32; 64]);
    owner.finalize().unwrap().destroy().unwrap();
}
