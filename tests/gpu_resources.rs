//! GPU tests of the guards on registered resources (docs/host.md, "Resources"): `close_all_resources` never frees
//! what a running kernel or a CUDA graph uses, and launches and replays refuse released resources afterwards (and a
//! graph keeps its kernels' modules loaded); a
//! launch takes the device communicator and windows of one communicator only; every rank refuses a window whose
//! parts differ in size. The tests named `…_on_every_rank` run every rank of the placement (`WEFT_RANKS`, else one
//! per visible GPU). Run on a GPU machine with `--include-ignored`.

use weft_kit::test_kernels as kernels;

use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::CudaStream;
use weft::host::caps::Lsa;
use weft::host::{
    spmd, Communicator, Config, DevComm, DeviceBuffer, Error, Graph, Group, LaunchConfig, Placement, ReduceOp,
    UniqueId, WindowFlags,
};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

fn stream(comm: &Communicator) -> Arc<CudaStream> {
    comm.context().new_stream().unwrap()
}

fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

/// Barrier round trips of the long kernel: long enough (about a second at one rank) that it still runs when
/// `close_all_resources` is called right after launching it.
const ROUNDS: u32 = 1 << 21;

/// A kernel using a device communicator, and a graph replaying it and a kernel over a window, still run when
/// `close_all_resources` is called: it returns only once they finished, then launches and the replay are refused.
#[test]
#[ignore = "needs a CUDA GPU"]
fn close_all_resources_waits_for_running_kernels_then_refuses_launches_and_replays() {
    let comm = one_rank();
    let s = stream(&comm);
    let cfg = LaunchConfig::linear(1, 32);
    let n = 4096;
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&kernels::barrier_round_trips::requirements(&cfg)).unwrap();
    let window = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC).unwrap();
    let recorded_done = DeviceBuffer::from_host(&s, &[0u32]).unwrap();
    let mut graph = Graph::capture(&s, |c| {
        kernels::barrier_round_trips::record(c, cfg, &dev, ROUNDS, &recorded_done)?;
        kernels::fill_window::record(c, cfg, &window, 2.0, n)?;
        c.all_reduce_in_place(&comm, window.buffer(), ReduceOp::Sum)
    })
    .unwrap();
    graph.replay().unwrap();
    let mut done = DeviceBuffer::from_host(&s, &[0u32]).unwrap();
    kernels::barrier_round_trips::launch(&s, cfg, &dev, ROUNDS, &mut done).unwrap();
    let launched = s.record_event(None).unwrap();
    assert!(
        !launched.try_is_complete().unwrap(),
        "precondition: the kernels still run when close_all_resources is called (raise ROUNDS)"
    );

    let started = Instant::now();
    let errors = comm.close_all_resources();
    let waited = started.elapsed();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        launched.try_is_complete().unwrap(),
        "close_all_resources released the device communicator and the window under kernels still using them"
    );
    println!("close_all_resources waited {waited:?} for the kernels and the replay");
    assert_eq!(done.copy_to_host().unwrap(), [ROUNDS], "the kernel ran to its end on a live device communicator");
    assert_eq!(graph.read(&recorded_done).unwrap(), [ROUNDS]);

    match kernels::barrier_round_trips::launch(&s, cfg, &dev, 1, &mut done) {
        Err(Error::InvalidArgument { argument: "dev", problem }) => assert!(problem.contains("close_all_resources")),
        other => panic!("a launch with a released device communicator was not refused: {other:?}"),
    }
    match kernels::fill_window::launch(&s, cfg, &window, 1.0, n) {
        Err(Error::InvalidArgument { argument: "window", .. }) => {}
        other => panic!("a launch with a released window was not refused: {other:?}"),
    }
    match graph.replay() {
        Err(Error::InvalidArgument { argument: "graph", problem }) => assert!(problem.contains("capture the graph")),
        other => panic!("a graph over released resources replayed: {other:?}"),
    }
    assert!(comm.close_all_resources().is_empty(), "idempotent");
    drop(graph);
    drop((window, dev, recorded_done));
    comm.finalize().unwrap().destroy().unwrap();
}

/// A graph keeps the modules of the kernels it recorded loaded: clearing the kernel registry (which unloads modules
/// nothing else holds) leaves its replays working.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_graph_keeps_its_kernels_loaded_when_the_kernel_registry_is_cleared() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 4096;
    let out = DeviceBuffer::from_host(&s, &vec![0.0f32; n]).unwrap();
    let mut graph =
        Graph::capture(&s, |c| kernels::bounded_fill::record(c, LaunchConfig::linear(8, 128), &out, 3.0, n)).unwrap();
    weft::host::jit::KernelRegistry::global().clear();
    graph.replay().unwrap();
    assert!(graph.read(&out).unwrap().iter().all(|&v| v == 3.0), "the replay ran the recorded kernel");
    drop(graph);
    drop(out);
    comm.finalize().unwrap().destroy().unwrap();
}

/// A registration owns its buffer and lends its elements: written through the view, read back, used by a
/// collective; dropped after that collective's last use; taken back whole.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_registration_lends_its_elements_and_gives_its_buffer_back() {
    let comm = one_rank();
    let s = stream(&comm);
    let n = 1 << 16;
    let mut registration = comm.register(DeviceBuffer::<f32>::new(&s, n).unwrap()).unwrap();
    let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
    registration.buffer_mut().copy_from_host(&values).unwrap();
    assert_eq!(registration.view().slice(10..20).unwrap().copy_to_host().unwrap(), values[10..20]);
    let mut out = DeviceBuffer::<f32>::new(&s, n).unwrap();
    comm.all_reduce(registration.buffer(), &mut out, ReduceOp::Sum, &s).unwrap();
    assert_eq!(out.copy_to_host().unwrap(), values);
    // A sub-view as a collective's destination writes only its part.
    let mut part = registration.buffer_mut();
    let mut tail = part.slice_mut(n - 8..).unwrap();
    let ones = DeviceBuffer::from_host(&s, &[1.0f32; 8]).unwrap();
    comm.all_reduce(&ones, &mut tail, ReduceOp::Sum, &s).unwrap();
    let back = registration.into_buffer().unwrap();
    let got = back.copy_to_host().unwrap();
    assert_eq!(got[..n - 8], values[..n - 8]);
    assert_eq!(got[n - 8..], [1.0; 8]);
    comm.finalize().unwrap().destroy().unwrap();
}

/// On every rank: a window of the communicator next to a device communicator of a communicator split from it (the
/// same ranks, another communicator) is refused with `Error::MixedCommunicators`, so are two windows of the two, and
/// the child's own window launches.
#[test]
#[ignore = "needs a CUDA GPU"]
fn a_launch_mixing_communicators_is_refused_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    let n = 4096;
    let outcomes = spmd(placement.devices(), &Config::new(), |comm| {
        let rank = comm.rank();
        let config = weft::host::placement::shared_gpu_config(&Config::new(), comm.ranks_on_gpu());
        let child = comm.split(Some(0), rank as i32, Some(&config))?.expect("every rank gave a color");
        let s = comm.context().new_stream()?;
        let cfg = LaunchConfig::linear(1, 128);
        let parent_window = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        let mut child_window = child.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        child_window.buffer_mut().copy_from_host(&vec![rank as f32; n])?;
        let child_dev: DevComm<'_, Lsa> = child.dev_comm(&kernels::copy_from_next_peer::requirements(&cfg))?;
        let mut out = DeviceBuffer::<f32>::new(&s, n)?;

        let mixed = kernels::copy_from_next_peer::launch(&s, cfg, &child_dev, &parent_window, &mut out, n);
        let windows = kernels::copy_window::launch(&s, cfg, &parent_window, &child_window, n);
        // The child's own window: launched (every rank, so the barrier meets), reading the next LSA peer's part.
        kernels::copy_from_next_peer::launch(&s, cfg, &child_dev, &child_window, &mut out, n)?;
        let copied = child.download(&s, &out)?;
        drop((child_dev, child_window, parent_window));
        child.finalize().map_err(Error::from)?.destroy().map_err(Error::from)?;
        Ok((mixed, windows, copied))
    })
    .unwrap();
    for (rank, (mixed, windows, copied)) in outcomes.into_iter().enumerate() {
        match mixed {
            Err(Error::MixedCommunicators { parameter: "src", first: "dev", .. }) => {}
            other => panic!("rank {rank}: the parent's window with the child's device communicator: {other:?}"),
        }
        match windows {
            Err(Error::MixedCommunicators { parameter: "dst", first: "src", .. }) => {}
            other => panic!("rank {rank}: windows of two communicators: {other:?}"),
        }
        // One LSA team of every rank (ranks on one node): the next LSA peer is the next rank.
        let next = ((rank + 1) % nranks) as f32;
        assert!(copied.iter().all(|&v| v == next), "rank {rank}: copied {} instead of {next}", copied[0]);
    }
    println!("{nranks} rank(s): mixed launches refused, the child's own window copied");
}

/// On every rank, with at least two: one rank registers a part of another size; every rank gets
/// `Error::AsymmetricWindow` (blocking and grouped), and an equal registration afterwards works.
#[test]
#[ignore = "needs a CUDA GPU"]
fn windows_of_unequal_sizes_are_refused_at_registration_on_every_rank() {
    let placement = placement();
    let nranks = placement.nranks();
    if nranks < 2 {
        println!("skipped: needs at least two ranks (WEFT_RANKS=2 or two GPUs)");
        return;
    }
    let (n, short) = (4096, 4000);
    let len_of = |rank: usize| if rank == nranks - 1 { short } else { n };
    let outcomes = spmd(placement.devices(), &Config::new(), |comm| {
        let s = comm.context().new_stream()?;
        let len = len_of(comm.rank());
        let blocking = comm.alloc_window::<f32>(&s, len, WindowFlags::COLL_SYMMETRIC).map(|w| w.len());
        let group = Group::start()?;
        let pending = comm.window_in(&group, DeviceBuffer::<f32>::new(&s, len)?, WindowFlags::COLL_SYMMETRIC)?;
        group.end()?;
        let grouped = pending.wait(Duration::from_secs(120)).map(|w| w.len());
        // Equal sizes: accepted, and usable.
        let equal = comm.alloc_window::<f32>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        let equal_len = equal.len();
        drop(equal);
        Ok((blocking, grouped, equal_len))
    })
    .unwrap();
    for (rank, (blocking, grouped, equal_len)) in outcomes.into_iter().enumerate() {
        for (how, outcome) in [("blocking", blocking), ("grouped", grouped)] {
            match outcome {
                Err(Error::AsymmetricWindow { rank: r, bytes, other_bytes, .. }) => {
                    assert_eq!(r, rank);
                    assert_eq!(bytes, 4 * len_of(rank) as u64);
                    assert_ne!(other_bytes, bytes);
                }
                other => panic!("rank {rank} ({how}): a window of unequal parts was not refused: {other:?}"),
            }
        }
        assert_eq!(equal_len, n);
    }
    println!("{nranks} rank(s): unequal windows refused on every rank, blocking and grouped");
}
