//! Single-process SPMD: one thread per local GPU, each with its own active communicator.

use crate::comm::UniqueId;
use crate::comm::{Active, Communicator};
use crate::config::Config;
use crate::error::Error;

/// Runs `body` on one thread per listed device, each with rank `i` of a fresh blocking communicator on
/// `devices[i]`, and returns the results in rank order.
///
/// The communicator is finalized and destroyed after `body` returns (aborted if `body` failed, so a rank
/// that errors never leaves the others waiting in finalize forever). A panic in one rank's body is turned
/// into an error for that rank after aborting its communicator.
pub fn spmd<R: Send>(
    devices: &[usize],
    config: &Config,
    body: impl Fn(&Communicator<Active>) -> Result<R, Error> + Sync,
) -> Result<Vec<R>, Error> {
    if devices.is_empty() {
        return Err(Error::invalid("devices", "list at least one CUDA device"));
    }
    let id = UniqueId::new()?;
    let nranks = devices.len();
    let outcomes: Vec<Result<R, Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(rank, &device)| {
                let body = &body;
                scope.spawn(move || -> Result<R, Error> {
                    let comm = Communicator::init_rank(device, nranks, rank, &id, config)?;
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
