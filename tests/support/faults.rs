//! What the fault tests share (tests/gpu_faults.rs, tests/gpu_gin_faults.rs): the placement of two or more ranks,
//! a blocking communicator per rank in its GPU's group, one thread per rank, and the checks that follow a fault:
//! the device memory comes back and a new communicator works.

#![allow(dead_code)] // each test file uses part of it

use std::sync::Arc;
use std::time::Duration;

use weft::host::placement::{shared_gpu_config, LocalGroup};
use weft::host::{Communicator, Config, Error, Placement, ReduceOp, UniqueId};

/// The placement, or `None` (the test then skips) when it has a single rank.
pub fn placement() -> Option<Placement> {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    if placement.nranks() < 2 {
        println!("skipped: a fault with a real peer needs 2 or more ranks (WEFT_RANKS=2 on one GPU will do)");
        return None;
    }
    Some(placement)
}

/// The placement where it has two or more ranks that NCCL launches in lock step (`NCCL_LAUNCH_MODE=GROUP`), or `None`
/// (the test then skips, saying why).
pub fn placement_in_group_launch_mode() -> Option<Placement> {
    let placement = placement()?;
    if !weft::host::placement::launches_in_step() {
        println!(
            "skipped: only NCCL_LAUNCH_MODE=GROUP launches the ranks together (docs/multi-rank.md, \"Launch mode\")"
        );
        return None;
    }
    Some(placement)
}

/// Rank `rank`'s blocking communicator of `id`, in the group of the ranks sharing its GPU (`groups[rank]`, from
/// `placement.local_groups()`).
pub fn init(
    placement: &Placement,
    groups: &[Arc<LocalGroup>],
    rank: usize,
    id: &UniqueId,
) -> Result<Communicator, Error> {
    let config = shared_gpu_config(&Config::new().comm_name("weft-faults"), groups[rank].size());
    Communicator::uninit(placement.devices()[rank])?.sharing_gpu_in(&groups[rank])?.init(
        placement.nranks(),
        rank,
        id,
        &config,
    )
}

/// Runs `body(rank)` on one thread per rank of `ranks` and returns the results in rank order.
pub fn on_threads<R: Send>(ranks: usize, body: impl Fn(usize) -> R + Sync) -> Vec<R> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|rank| {
                scope.spawn({
                    let body = &body;
                    move || body(rank)
                })
            })
            .collect();
        handles.into_iter().map(|handle| handle.join().expect("a rank's thread panicked")).collect()
    })
}

/// Free memory on every GPU of the placement, in bytes.
pub fn free_memory(placement: &Placement) -> Vec<usize> {
    let mut devices = placement.devices().to_vec();
    devices.dedup();
    devices
        .iter()
        .map(|&device| {
            weft::host::cuda::context(device).unwrap().bind_to_thread().unwrap();
            cudarc::driver::result::mem_get_info().unwrap().0
        })
        .collect()
}

/// What the failed communicators held must come back: free memory within a few MB of what it was before.
pub fn assert_released(before: &[usize], after: &[usize]) {
    for (device, (b, a)) in before.iter().zip(after).enumerate() {
        let lost = b.saturating_sub(*a);
        println!("GPU {device}: {} MB free before, {} MB after", b >> 20, a >> 20);
        assert!(lost < 64 << 20, "GPU {device}: {} MB not given back", lost >> 20);
    }
}

/// A new communicator over every rank of the placement works: an all-reduce of rank + 1 gives n(n+1)/2.
pub fn a_new_communicator_works(placement: &Placement) {
    let n = placement.nranks();
    let sums = weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let s = comm.context().new_stream()?;
        let send = s.clone_htod(&vec![(comm.rank() + 1) as f32; 4096])?;
        let mut recv = s.alloc_zeros::<f32>(4096)?;
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s)?;
        comm.wait(&s, Duration::from_secs(30))?;
        weft::host::cuda::download(&s, &recv)
    })
    .unwrap();
    let want = (n * (n + 1) / 2) as f32;
    assert!(sums.iter().all(|sum| sum.iter().all(|&v| v == want)), "a new communicator's all-reduce is wrong");
}

/// Process-wide state (CUDA contexts, NCCL's globals, the kernel cache) is allocated once; do it before measuring.
pub fn warm_up(placement: &Placement) -> Vec<usize> {
    a_new_communicator_works(placement);
    free_memory(placement)
}
