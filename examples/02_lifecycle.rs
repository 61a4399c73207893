//! The communicator's typestates in use, on every visible GPU (one rank per GPU, one thread per rank): no kernels,
//! only the host runtime.
//!
//! ```sh
//! cargo run --release --example lifecycle
//! ```
//!
//! Each rank, in order:
//!
//! 1. `Communicator<Uninit>` → `init` → `Communicator<Active>` (blocking), then its properties (what NCCL 2.28
//!    cannot report is printed as "unknown", never guessed);
//! 2. a symmetric window (`ncclMemAlloc` + `ncclCommWindowRegister`) and a device communicator `DevComm<Lsa>`
//!    over it, then a request for `DevComm<LsaGin>`, which a machine without GIN refuses with a capability error
//!    (both borrow the communicator: finalizing while they live does not compile);
//! 3. memory statistics and `suspend` → `Communicator<Suspended>` → `resume`, where the loaded NCCL has them
//!    (2.29+); on 2.28 the `Unsupported` error is printed and the failed transition hands the communicator back;
//! 4. an all-reduce to show the resumed communicator works, then `split` into even and odd ranks, and the child
//!    finalized and destroyed;
//! 5. `finalize` → `Communicator<Finalized>` → `destroy`;
//! 6. a second communicator, aborted (`abort` never waits for peers);
//! 7. a non-blocking communicator: `init` returns a `Pending`, polled once and then with `Pending::wait`; its
//!    `finalize` is another `Pending`.
//!
//! Every rank prints what happened; the example exits non-zero if anything not explained by the NCCL version or
//! the machine failed. On a machine without a GPU it says so and exits 0 (it has no kernels to compile).

use weft_kit::common;

use std::time::{Duration, Instant};

use common::Result;
use std::sync::Arc;
use weft::host::caps::{Lsa, LsaGin};

use weft::host::placement::{shared_gpu_config, LocalGroup};
use weft::host::{
    Communicator, Config, DevComm, Error, MemStat, Polled, ReduceOp, Requirements, SuspendFlags, UniqueId, WindowFlags,
};

const WAIT: Duration = Duration::from_secs(120);

fn main() -> Result<()> {
    println!("weft example 02 — the communicator lifecycle (typestates) on every visible GPU\n");
    let ranks = match common::gpus() {
        Ok(_) => common::Ranks::from_env()?,
        Err(why) => {
            println!(
                "No GPU here: {why}.\n\nThis example is host-only (no kernels to compile). On a machine with NVIDIA GPUs \
                 it runs one rank per GPU through init, properties, a window and a device communicator, memory \
                 statistics and suspend/resume (NCCL 2.29+), split, finalize/destroy, abort, and a non-blocking \
                 init polled to completion."
            );
            return Ok(());
        }
    };
    let placement = match &ranks {
        common::Ranks::Local(placement) => placement.clone(),
        common::Ranks::Launched(job) => return under_a_launcher(job),
    };
    println!("one thread per rank; NCCL is loaded at run time\n");
    // One id per communicator the ranks create together, made here and shared (a multi-process job would send
    // them out of band: `UniqueId` prints as hex and parses back).
    let (blocking_id, aborted_id, nonblocking_id) = (UniqueId::new()?, UniqueId::new()?, UniqueId::new()?);
    println!("unique id of the first communicator: {blocking_id}");
    let outcomes: Vec<std::result::Result<Vec<String>, Error>> = std::thread::scope(|scope| {
        // The ranks (threads) sharing a GPU line up after each collective setup call (placement::LocalGroup).
        let groups = placement.local_groups();
        let handles: Vec<_> = (0..placement.nranks())
            .map(|rank| {
                let ids = (&blocking_id, &aborted_id, &nonblocking_id);
                let (placement, group) = (&placement, groups[rank].clone());
                scope.spawn(move || {
                    let mut log = Vec::new();
                    let at = Place {
                        rank,
                        nranks: placement.nranks(),
                        device: placement.devices()[rank],
                        sharing: placement.ranks_on_gpu(rank),
                    };
                    let outcome = rank_lifecycle(at, Some(&group), ids, &mut log);
                    outcome.map(|()| log)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(failure("rank", "its thread panicked")))).collect()
    });
    let mut failed = 0;
    for (rank, outcome) in outcomes.iter().enumerate() {
        println!("rank {rank}:");
        match outcome {
            Ok(log) => log.iter().for_each(|line| println!("  {line}")),
            Err(error) => {
                failed += 1;
                println!("  FAILED: {error}");
            }
        }
    }
    if failed == 0 {
        println!("\nevery rank went through the whole lifecycle");
        Ok(())
    } else {
        Err(format!("{failed} rank(s) failed").into())
    }
}

/// One process of a job a launcher started: this rank's walk, with the job's id for each of its communicators in
/// turn (NCCL's `NCCL_COMM_ID` bootstrap gives every rank the same id; one communicator at a time uses it).
fn under_a_launcher(job: &weft::host::Job) -> Result<()> {
    let gpus = weft::host::cuda::device_count()?;
    let id = job.unique_id()?;
    let at =
        Place { rank: job.rank, nranks: job.world_size, device: job.device(gpus), sharing: job.ranks_on_gpu(gpus) };
    let mut log = Vec::new();
    let outcome = rank_lifecycle(at, None, (&id, &id, &id), &mut log);
    println!("rank {}:", job.rank);
    log.iter().for_each(|line| println!("  {line}"));
    outcome?;
    println!("\nthis rank went through the whole lifecycle");
    Ok(())
}

/// Where a rank runs: its rank, the job's size, its CUDA device and how many of the job's ranks share it.
#[derive(Clone, Copy)]
struct Place {
    rank: usize,
    nranks: usize,
    device: usize,
    sharing: usize,
}

/// A check of this example that failed, as weft's error type.
fn failure(what: &'static str, problem: &str) -> Error {
    Error::InvalidArgument { argument: what, problem: problem.to_owned() }
}

/// One rank's walk through the lifecycle; `log` collects what to print.
fn rank_lifecycle(
    Place { rank, nranks, device, sharing }: Place,
    group: Option<&Arc<LocalGroup>>,
    (blocking_id, aborted_id, nonblocking_id): (&UniqueId, &UniqueId, &UniqueId),
    log: &mut Vec<String>,
) -> std::result::Result<(), Error> {
    // Ranks sharing a GPU cap NCCL's CTAs per kernel (what `spmd` does for them).
    let config = |name: &str| shared_gpu_config(&Config::new().comm_name(name), sharing);
    // `sharing_gpu_in` says which ranks (threads of this process) share this GPU; a rank alone in its process says
    // how many share it (`sharing_gpu`).
    let start = |device: usize| match group {
        Some(group) => Communicator::uninit(device)?.sharing_gpu_in(group),
        None => Communicator::uninit(device)?.sharing_gpu(sharing),
    };

    // 1. Uninit -> Active, and what the communicator can do.
    let uninit = start(device)?;
    let comm = uninit.init(nranks, rank, blocking_id, &config("weft-lifecycle"))?;
    log.push(format!(
        "init: Communicator<Active>, rank {}/{} (NCCL {})",
        comm.rank(),
        comm.nranks(),
        comm.nccl_version()
    ));
    log.push(format!("properties: {}", comm.properties()?));
    log.push(format!(
        "placement: CUDA device {device}, shared by {} rank(s) of this communicator",
        comm.ranks_on_gpu()
    ));

    // 2. A window and device communicators; they borrow `comm`, so they must be gone before it can change state.
    {
        let stream = comm.context().new_stream()?;
        let mut window = comm.alloc_window::<f32>(&stream, 1 << 20, WindowFlags::COLL_SYMMETRIC)?;
        window.buffer_mut().copy_from_host(&vec![rank as f32; 1 << 20])?;
        let back = window.buffer().copy_to_host()?;
        log.push(format!(
            "window: {} f32 elements ({} MB of ncclMemAlloc memory), registered; reads back {}",
            window.len(),
            window.buffer().num_bytes() >> 20,
            if back.iter().all(|v| *v == rank as f32) { "intact" } else { "WRONG" }
        ));
        if back.iter().any(|v| *v != rank as f32) {
            return Err(failure("window", "its memory did not read back what was written"));
        }
        match window.lsa_address(0, 0) {
            Ok(address) => log.push(format!("window: LSA rank 0's part is at device address {address:#x} here")),
            Err(error) => log.push(format!("window: host-side LSA address query: {error}")),
        }
        let dev: DevComm<'_, Lsa> = comm.dev_comm(&Requirements::new().lsa_barriers(8))?;
        log.push(format!(
            "device communicator: DevComm<Lsa> with {} LSA barriers, capabilities {:?}, {} bytes as a kernel argument",
            dev.lsa_barriers(),
            dev.capabilities(),
            dev.kernel_arg_bytes()?.len()
        ));
        match comm.dev_comm::<LsaGin>(&Requirements::new().lsa_barriers(1).gin_signals(1)) {
            Ok(gin) => log.push(format!("device communicator: DevComm<LsaGin> too, {} GIN signals", gin.gin_signals())),
            Err(error @ Error::MissingCapability { .. }) => {
                log.push(format!("device communicator: DevComm<LsaGin> refused, as expected here: {error}"))
            }
            Err(error) => return Err(error),
        }
        // `comm.finalize()` here would not compile: `dev` and `window` borrow `comm`.
        drop(dev);
        drop(window);
    }

    // 3. Memory statistics and suspend/resume (NCCL 2.29+).
    match comm.mem_stat(MemStat::Total) {
        Ok(total) => log.push(format!(
            "memory: {total} bytes tracked, {} suspendable, {} persistent",
            comm.mem_stat(MemStat::Suspendable)?,
            comm.mem_stat(MemStat::Persistent)?
        )),
        Err(error @ Error::Unsupported { .. }) => log.push(format!("memory statistics: {error}")),
        Err(error) => return Err(error),
    }
    let comm = match comm.suspend(SuspendFlags::MEMORY) {
        Ok(suspended) => {
            // Communicator<Suspended>: no collectives, no resources; only resume, abort and queries.
            log.push(format!(
                "suspend: Communicator<Suspended>, suspended flag {}, {} bytes still allocated",
                suspended.mem_stat(MemStat::Suspended)?,
                suspended.mem_stat(MemStat::Total)?
            ));
            let resumed = suspended.resume()?;
            log.push(format!(
                "resume: Communicator<Active> again, {} bytes tracked",
                resumed.mem_stat(MemStat::Total)?
            ));
            resumed
        }
        Err(failed) if matches!(failed.error(), Error::Unsupported { .. }) => {
            log.push(format!("suspend: {} — the communicator came back unchanged", failed.error()));
            failed.into_communicator()
        }
        Err(failed) => return Err(failed.into_error()),
    };

    // 4. The communicator still works; split it into even and odd ranks.
    {
        let stream = comm.context().new_stream()?;
        let send = stream.clone_htod(&vec![(rank + 1) as f32; 4096])?;
        let mut recv = stream.alloc_zeros::<f32>(4096)?;
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
        let sum = weft::host::cuda::download(&stream, &recv)?;
        let want = (nranks * (nranks + 1) / 2) as f32;
        log.push(format!("all-reduce of rank + 1: {} (expected {want})", sum[0]));
        if sum.iter().any(|v| *v != want) {
            return Err(failure("all_reduce", "the sum differs from the expected value"));
        }
    }
    let color = (rank % 2) as u32;
    match comm.split(Some(color), rank as i32, Some(&config("weft-lifecycle-half")))? {
        Some(child) => {
            log.push(format!("split (color {color}): child rank {}/{}", child.rank(), child.nranks()));
            child.finalize()?.destroy()?;
            log.push("split: child finalized and destroyed".into());
        }
        None => log.push(format!("split (color {color}): no communicator")),
    }

    // 5. Active -> Finalized -> destroyed.
    let finalized = comm.finalize()?;
    log.push(format!("finalize: Communicator<Finalized> (rank {} still readable)", finalized.rank()));
    finalized.destroy()?;
    log.push("destroy: done".into());

    // 6. Abort: no waiting for peers, whatever state they are in.
    let doomed = start(device)?.init(nranks, rank, aborted_id, &config("doomed"))?;
    doomed.abort()?;
    log.push("abort: a second communicator aborted".into());

    // 7. Non-blocking: every transition is a Pending, reachable only by polling.
    let started = Instant::now();
    let pending = Communicator::uninit_nonblocking(device)?.sharing_gpu(sharing)?.init(
        nranks,
        rank,
        nonblocking_id,
        &config("weft-lifecycle-nonblocking"),
    )?;
    let comm = match pending.poll()? {
        Polled::Ready(comm) => {
            log.push("non-blocking init: ready at the first poll".into());
            comm
        }
        Polled::Pending(pending) => {
            log.push("non-blocking init: still in progress at the first poll; Pending::wait polls on".into());
            pending.wait(WAIT)?
        }
    };
    log.push(format!(
        "non-blocking init: Communicator<Active, NonBlocking>, rank {}/{}, after {:.1} ms",
        comm.rank(),
        comm.nranks(),
        started.elapsed().as_secs_f64() * 1e3
    ));
    let finalized = comm.finalize()?.wait(WAIT)?;
    finalized.destroy()?;
    log.push("non-blocking finalize: waited for, then destroyed".into());
    Ok(())
}
