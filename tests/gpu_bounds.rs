//! GPU tests of launch soundness (docs/macro.md, "Bounds"; docs/kernel-abi.md, "Launch checks"): a launch whose
//! proven bound fails is refused with a typed error before anything runs; an access the macro could not prove is
//! checked on the device, and a failing one stops the kernel (in a child process: a trap leaves the CUDA context
//! unusable); so is a computed resource index past its declared count; a hand-packed argument list that differs
//! from the compiled kernel's parameters is refused.

use weft_kit::test_kernels as kernels;

use std::process::Command;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft::host::caps::Lsa;
use weft::host::jit::{BoundsChecks, KernelSpec};
use weft::host::launch::KernelArgs;
use weft::host::{Communicator, Config, DevComm, Error, LaunchConfig, UniqueId};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

fn stream(comm: &Communicator) -> Arc<CudaStream> {
    comm.context().new_stream().unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_launch_whose_proven_bound_fails_is_refused_before_running() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 1000;
    let mut short = s.clone_htod(&vec![0.0f32; n - 1]).unwrap();
    let err = kernels::bounded_fill::launch(&s, LaunchConfig::linear(4, 128), &mut short, 1.0, n).unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(&err, Error::OutOfBounds { kernel: "bounded_fill", parameter: "out", access: "out[i]", .. }),
        "{text}"
    );
    assert!(text.contains("the index reaches 999, but `out` has 999 elements"), "{text}");
    // Nothing ran: the buffer is untouched.
    assert!(s.clone_dtoh(&short).unwrap().iter().all(|&v| v == 0.0));
    // The same buffer with a matching length launches.
    kernels::bounded_fill::launch(&s, LaunchConfig::linear(4, 128), &mut short, 1.0, n - 1).unwrap();
    assert!(s.clone_dtoh(&short).unwrap().iter().all(|&v| v == 1.0));

    // A pack access: `squares` holds one value per pack of `out`.
    let lanes = weft::device::pack_lanes::<f32>();
    let (x, y) = (s.clone_htod(&vec![1.0f32; n]).unwrap(), s.clone_htod(&vec![2.0f32; n]).unwrap());
    let mut out = s.clone_htod(&vec![0.0f32; n]).unwrap();
    let mut squares = s.clone_htod(&vec![0.0f32; n / lanes - 1]).unwrap();
    let err = kernels::pack_axpy::launch(&s, LaunchConfig::linear(4, 128), 1.0, &x, 0, &y, &mut out, &mut squares, n)
        .unwrap_err();
    assert!(matches!(&err, Error::OutOfBounds { parameter: "squares", .. }), "{err}");
    // A sub-slice past its buffer's end.
    let err = kernels::pack_axpy::launch(&s, LaunchConfig::linear(4, 128), 1.0, &x, 1, &y, &mut out, &mut squares, n)
        .unwrap_err();
    assert!(matches!(&err, Error::OutOfBounds { parameter: "x", .. }), "{err}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_access_checked_on_the_device_runs_when_in_bounds() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 4096;
    let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let idx: Vec<u32> = (0..n as u32).rev().collect();
    let (xd, idxd) = (s.clone_htod(&x).unwrap(), s.clone_htod(&idx).unwrap());
    let mut out = s.clone_htod(&vec![0.0f32; n]).unwrap();
    kernels::gather::launch(&s, LaunchConfig::linear(8, 128), &xd, &idxd, &mut out, n).unwrap();
    let got = s.clone_dtoh(&out).unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == (n - 1 - i) as f32));
}

/// Set in the child process of [`a_failed_device_check_stops_the_kernel`].
const CHILD: &str = "WEFT_BOUNDS_TEST_CHILD";

/// The child's half: a gather with one index past `x`'s end. The checked form traps; the stream reports it.
#[test]
#[ignore = "needs a CUDA GPU; run by a_failed_device_check_stops_the_kernel in its own process"]
fn device_check_child() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let comm = one_rank();
    let s = stream(&comm);
    let n = 256;
    let mut idx: Vec<u32> = (0..n as u32).collect();
    idx[77] = 1 << 30;
    let (xd, idxd) = (s.clone_htod(&vec![1.0f32; n]).unwrap(), s.clone_htod(&idx).unwrap());
    let mut out = s.clone_htod(&vec![0.0f32; n]).unwrap();
    kernels::gather::launch(&s, LaunchConfig::linear(2, 128), &xd, &idxd, &mut out, n).unwrap();
    let synced = s.synchronize();
    println!("child: synchronize after the out-of-bounds gather: {synced:?}");
    assert!(synced.is_err(), "the kernel must have stopped with an error");
    // weft's own wait turns the driver's error into one that says which kernel stopped, where and why.
    let settled = weft::host::cuda::settle(&s);
    println!("child: weft's error: {settled:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_failed_device_check_stops_the_kernel() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args(["--exact", "device_check_child", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{text}");
    assert!(output.status.success(), "the child failed:\n{text}");
    assert!(text.contains("weft: out-of-bounds access at line"), "the device check's message is missing:\n{text}");
    assert!(text.contains("is not below 256"), "{text}");
    assert!(text.contains("synchronize after the out-of-bounds gather: Err"), "{text}");
    // The trap report (host/src/trap.rs): the kernel, the line, the index and the limit, in the error value.
    assert!(text.contains("weft's error: Err(kernel `gather` (block"), "{text}");
    assert!(text.contains("out-of-bounds access: index 1073741824 is not below 256"), "{text}");
}

/// Set in the child process of [`a_computed_barrier_index_past_its_count_stops_the_kernel`].
const BARRIER_CHILD: &str = "WEFT_BARRIER_INDEX_TEST_CHILD";

/// The child's half: `barrier_at` (4 LSA barriers declared) first within its count, then with barrier index 4, which
/// no requirement covers: the device check stops the kernel before NCCL touches the barrier, and weft's error is
/// `Error::KernelTrapped`.
#[test]
#[ignore = "needs a CUDA GPU; run by a_computed_barrier_index_past_its_count_stops_the_kernel in its own process"]
fn barrier_index_child() {
    if std::env::var_os(BARRIER_CHILD).is_none() {
        return;
    }
    let comm = one_rank();
    let s = stream(&comm);
    let cfg = LaunchConfig::linear(2, 128);
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_at::requirements(&cfg)).unwrap();
    assert!(dev.lsa_barriers() >= 4, "the declared count is required");
    let mut done = s.clone_htod(&[0u32; 2]).unwrap();
    // Barriers 2 and 3: within the count.
    kernels::barrier_at::launch(&s, cfg, &dev, 2, &mut done).unwrap();
    assert_eq!(s.clone_dtoh(&done).unwrap(), vec![2, 3]);
    // Barriers 4 and 5: past it.
    kernels::barrier_at::launch(&s, cfg, &dev, 4, &mut done).unwrap();
    let settled = weft::host::cuda::settle(&s);
    println!("child: weft's error: {settled:?}");
    match settled {
        Err(Error::KernelTrapped { report, .. }) => println!("child: trapped: {report}"),
        other => panic!("expected Error::KernelTrapped, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_computed_barrier_index_past_its_count_stops_the_kernel() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args(["--exact", "barrier_index_child", "--include-ignored", "--nocapture", "--test-threads=1"])
        .env(BARRIER_CHILD, "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    println!("{text}");
    assert!(output.status.success(), "the child failed:\n{text}");
    assert!(text.contains("child: trapped: kernel `barrier_at` (block"), "{text}");
    // Block 0 asks for barrier 4, block 1 for barrier 5: whichever traps first writes the report.
    assert!(
        text.contains("out-of-bounds access: index 4 is not below 4")
            || text.contains("out-of-bounds access: index 5 is not below 4"),
        "{text}"
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn arguments_that_differ_from_the_compiled_parameters_are_refused() {
    let comm = one_rank();
    let s = stream(&comm);
    let mut out = s.clone_htod(&vec![0.0f32; 64]).unwrap();
    let spec = KernelSpec {
        name: kernels::bounded_fill::NAME,
        source: kernels::bounded_fill::SOURCE,
        entry_point: kernels::bounded_fill::ENTRY_POINTS[0],
    };
    // `n` pushed as a u32: 4 bytes at offset 20, where the kernel takes a size_t at 24.
    let mut args = KernelArgs::with_parameters(spec.name, &["out", "value", "n"], &s);
    args.push_slice_mut("out", &mut out).unwrap();
    args.push_scalar("value", 1.0f32);
    args.push_scalar("n", 64u32);
    // SAFETY: the launch is refused before anything runs (what this test checks); were it not, the kernel would
    // write at most 64 elements into `out` (its index is below `n`'s low bytes, 64), which holds 64.
    let err = unsafe { args.launch(&spec, LaunchConfig::linear(1, 64), BoundsChecks::Off) }.unwrap_err();
    assert!(
        matches!(&err, Error::ParamMismatch { kernel: "bounded_fill", parameter, .. } if parameter == "`n` (#2)"),
        "{err}"
    );
    // One argument short.
    let mut args = KernelArgs::new(spec.name, &s);
    args.push_slice_mut("out", &mut out).unwrap();
    args.push_scalar("value", 1.0f32);
    // SAFETY: refused before launching, as above.
    let err = unsafe { args.launch(&spec, LaunchConfig::linear(1, 64), BoundsChecks::Off) }.unwrap_err();
    assert!(err.to_string().contains("packs 2 arguments, the compiled kernel takes 3"), "{err}");
    assert!(s.clone_dtoh(&out).unwrap().iter().all(|&v| v == 0.0));
}
