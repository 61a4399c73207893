//! Symmetric windows are symmetric: every rank registers a part of the same size.
//!
//! A kernel reaches a peer's part of a window through `x.lsa(peer)` / `x.peer(team, peer)` and GIN, and bounds those
//! accesses by this rank's own length (docs/macro.md, "Bounds"). NCCL does not require equal sizes (it maps each
//! peer's allocation as registered), so a peer that registered less would be read or written past its end. weft
//! gathers every rank's size when the window is registered — registration is collective, so one more collective
//! there costs nothing the ranks were not already doing together — and every rank refuses unequal sizes with
//! [`Error::AsymmetricWindow`].

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtrMut};

use crate::comm::{Active, Communicator, Mode};
use crate::error::Error;

/// This rank's size, being gathered from every rank by an `ncclAllGather` enqueued on `stream` (inside the NCCL group
/// of the registration when there is one); [`SizeExchange::agree`] reads the result once it ran.
pub(crate) struct SizeExchange {
    /// Two `u32` words per rank (low, high) of its part's size in bytes, in rank order.
    sizes: CudaSlice<u32>,
    /// This rank's two words; the all-gather reads them until it has run.
    _mine: CudaSlice<u32>,
    stream: Arc<CudaStream>,
}

impl std::fmt::Debug for SizeExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SizeExchange").finish_non_exhaustive()
    }
}

impl SizeExchange {
    /// Enqueues the all-gather of `bytes` over `comm` on `stream` (a stream of the communicator's device). Inside an
    /// NCCL group it only queues, and runs when the group ends, with the registration.
    pub(crate) fn enqueue<M: Mode>(
        comm: &Communicator<Active, M>,
        bytes: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<SizeExchange, Error> {
        // A graph weft did not start could replay the all-gather after these buffers are freed.
        crate::graph::refuse_foreign_capture("window registration", stream)?;
        let bytes = bytes as u64;
        let mut mine = stream.alloc_zeros::<u32>(2)?;
        {
            let (address, _write) = mine.device_ptr_mut(stream);
            stream.context().bind_to_thread()?;
            // Set on the device, in stream order: a host-to-device copy could wait, holding a driver lock, for work
            // the stream already holds (crate::cuda::settle says why that matters where ranks share a GPU).
            for (index, word) in [bytes as u32, (bytes >> 32) as u32].into_iter().enumerate() {
                // SAFETY: `address + 4 * index` is word `index` (< 2) of the live two-word allocation `mine`, written
                // on its own stream, which orders the write after its allocation and before the all-gather below.
                unsafe {
                    cudarc::driver::sys::cuMemsetD32Async(address + 4 * index as u64, word, 1, stream.cu_stream())
                }
                .result()?;
            }
        }
        let mut sizes = stream.alloc_zeros::<u32>(2 * comm.nranks())?;
        // Not `all_gather`, which refuses to run inside an NCCL group: this one may be queued in the registration's
        // group, and its buffers are owned by the exchange, which the window keeps (or leaks) until NCCL is done.
        drop(comm.all_gather_enqueue(&mine, &mut sizes, stream)?);
        Ok(SizeExchange { sizes, _mine: mine, stream: stream.clone() })
    }

    /// Waits for the all-gather (polling its stream) and checks that every rank's size is `rank`'s.
    pub(crate) fn agree(self, rank: usize) -> Result<(), Error> {
        let words = crate::cuda::download(&self.stream, &self.sizes)?;
        check_sizes(rank, &words)
    }
}

/// Whether every rank's size (two `u32` words each, low first) equals rank `rank`'s; otherwise the error naming the
/// first rank that differs from it.
pub(crate) fn check_sizes(rank: usize, words: &[u32]) -> Result<(), Error> {
    let sizes: Vec<u64> = words.chunks_exact(2).map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32)).collect();
    let Some(&bytes) = sizes.get(rank) else {
        return Err(Error::invalid("window", format!("rank {rank} is not among the {} ranks gathered", sizes.len())));
    };
    match sizes.iter().position(|&other| other != bytes) {
        None => Ok(()),
        Some(other_rank) => Err(Error::AsymmetricWindow { rank, bytes, other_rank, other_bytes: sizes[other_rank] }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(sizes: &[u64]) -> Vec<u32> {
        sizes.iter().flat_map(|&s| [s as u32, (s >> 32) as u32]).collect()
    }

    #[test]
    fn equal_sizes_agree_on_every_rank() {
        let big = (5u64 << 32) + 12;
        for rank in 0..4 {
            assert!(check_sizes(rank, &words(&[big; 4])).is_ok());
            assert!(check_sizes(rank, &words(&[4096; 4])).is_ok());
        }
        assert!(check_sizes(0, &words(&[8])).is_ok(), "one rank agrees with itself");
    }

    #[test]
    fn unequal_sizes_are_refused_on_every_rank_naming_one_that_differs() {
        // Rank 2 registered less; sizes that differ only above 4 GiB count too.
        let sizes = [1 << 20, 1 << 20, 1 << 19, 1 << 20];
        for rank in 0..4 {
            match check_sizes(rank, &words(&sizes)) {
                Err(Error::AsymmetricWindow { rank: r, bytes, other_rank, other_bytes }) => {
                    assert_eq!((r, bytes), (rank, sizes[rank]));
                    assert_ne!(other_bytes, bytes);
                    assert_eq!(other_rank, if rank == 2 { 0 } else { 2 });
                    let text = check_sizes(rank, &words(&sizes)).unwrap_err().to_string();
                    assert!(text.contains("same size"), "{text}");
                }
                other => panic!("rank {rank}: {other:?}"),
            }
        }
        let high = [(1u64 << 32) + 64, 64];
        assert!(matches!(check_sizes(1, &words(&high)), Err(Error::AsymmetricWindow { other_rank: 0, .. })));
        assert!(check_sizes(3, &words(&high)).is_err(), "a rank outside the gathered sizes");
    }
}
