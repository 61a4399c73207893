//! Single-process SPMD: one thread per rank, each with its own active communicator, over a device list that may
//! repeat a device (several ranks on one GPU).

use crate::comm::UniqueId;
use crate::comm::{Active, Communicator};
use crate::config::Config;
use crate::error::Error;
use crate::placement::{shared_gpu_config, Placement};

/// Runs `body` on one thread per listed device, each with rank `i` of a fresh blocking communicator on
/// `devices[i]`, and returns the results in rank order.
///
/// A device listed several times runs several ranks ([`Placement`] builds such lists; `Placement::from_env()`
/// reads `WEFT_RANKS`). That needs NCCL ≥ 2.30 and `NCCL_MULTI_RANK_GPU_ENABLE=1`, checked before any rank starts
/// ([`Error::GpuSharing`] otherwise); each rank's communicator then knows how many ranks share its GPU
/// ([`Communicator::ranks_on_gpu`]), and NCCL's CTAs per kernel are capped as [`shared_gpu_config`] says unless
/// `config` sets them.
///
/// The communicator is finalized and destroyed after `body` returns (aborted if `body` failed, so a rank
/// that errors never leaves the others waiting in finalize forever). A panic in one rank's body is turned
/// into an error for that rank after aborting its communicator.
pub fn spmd<R: Send>(
    devices: &[usize],
    config: &Config,
    body: impl Fn(&Communicator<Active>) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    let placement = Placement::new(devices.to_vec())?;
    let library = crate::sys::library()?;
    placement.check_supported(library.version())?;
    for &device in devices {
        // Every context exists before any rank starts (docs/multi-rank.md: the first stream of a context waits for
        // the whole device, harmless only while nothing runs).
        crate::cuda::context(device)?;
    }
    let id = UniqueId::new()?;
    let nranks = devices.len();
    // The ranks (threads) sharing a GPU line up after each collective setup call.
    let groups = placement.local_groups();
    let outcomes: Vec<Result<R, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &device)| {
                let (body, placement, group) = (&body, &placement, &groups[rank]);
                scope.spawn(move || -> Result<R, Error> {
                    let config = shared_gpu_config(config, placement.ranks_on_gpu(rank));
                    let comm = Communicator::uninit(device)?.sharing_gpu_in(group)?.init(nranks, rank, &id, &config)?;
                    match body(&comm) {
                        Ok(value) => {
                            let finalized = comm.finalize()?;
                            finalized.destroy()?;
                            Ok(value)
                        }
                        Err(error) => {
                            let _ = comm.abort();
                            Err(error)
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(rank, handle)| {
                handle.join().unwrap_or_else(|_| {
                    Err(Error::invalid("body", format!("rank {rank} panicked; its communicator was aborted")))
                })
            })
            .collect()
    });
    outcomes.into_iter().collect()
}

/// The CUDA devices visible to this process: `0..count`.
pub fn local_devices() -> Result<Vec<usize>, Error> {
    Ok((0..crate::cuda::device_count()?).collect())
}
