//! Status queries: last and asynchronous errors, memory statistics.

use super::{Communicator, Initialized, Mode};
use crate::error::Error;
use crate::result::{self, Progress};
use crate::sys;

/// A communicator memory statistic (`ncclCommMemStat_t`, NCCL 2.29+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemStat {
    /// GPU memory that `suspend` can release (bytes).
    Suspendable,
    /// Whether the suspendable memory is currently released (0 or 1).
    Suspended,
    /// GPU memory that stays allocated while suspended (bytes).
    Persistent,
    /// All GPU memory NCCL tracks for the communicator (bytes).
    Total,
}

impl MemStat {
    fn raw(self) -> sys::ncclCommMemStat_t {
        match self {
            MemStat::Suspendable => sys::ncclCommMemStat_t::ncclStatGpuMemSuspend,
            MemStat::Suspended => sys::ncclCommMemStat_t::ncclStatGpuMemSuspended,
            MemStat::Persistent => sys::ncclCommMemStat_t::ncclStatGpuMemPersist,
            MemStat::Total => sys::ncclCommMemStat_t::ncclStatGpuMemTotal,
        }
    }
}

impl<S: Initialized, M: Mode> Communicator<S, M> {
    /// The text of the last error NCCL logged (`ncclGetLastError`); empty when there was none.
    pub fn last_error(&self) -> String {
        result::last_error(self.library(), self.raw())
    }

    /// The communicator's asynchronous state (`ncclCommGetAsyncError`): `Ok(false)` when healthy and idle,
    /// `Ok(true)` while a non-blocking operation is still running, or the asynchronous error (a failed peer,
    /// a network error, …).
    pub fn async_error(&self) -> Result<bool, Error> {
        // SAFETY: our live, initialised communicator.
        let progress = unsafe { result::comm_get_async_error(self.library(), self.raw()) }?;
        Ok(progress == Progress::InProgress)
    }

    /// Waits until everything enqueued on `stream` so far has finished, watching the communicator: `Ok` once the
    /// stream is idle; the asynchronous error as soon as NCCL reports one (a peer that failed, a network error);
    /// [`Error::Stalled`] when `timeout` passes first (a peer that stopped arriving, or a slow job). On an error the
    /// communicator is left as it is, for the caller to abort, which ends its pending operations on every stream.
    ///
    /// Unlike `stream.synchronize()`, this never blocks past `timeout`: the way for a rank to notice that a peer
    /// went away in the middle of a collective.
    pub fn wait(&self, stream: &cudarc::driver::CudaStream, timeout: std::time::Duration) -> Result<(), Error> {
        crate::cuda::settle_watching(stream, timeout, || self.async_error().map(drop))
    }

    /// Copies `src` to a new host vector once `stream`'s earlier work is done, waiting as [`wait`](Self::wait)
    /// does (at most [`SETTLE_TIMEOUT`](crate::cuda::SETTLE_TIMEOUT)).
    ///
    /// Use it instead of `stream.clone_dtoh(src)` wherever ranks of one process share a GPU: cudarc's copy to
    /// pageable memory waits for the stream inside the driver, holding a lock that a peer rank's next launch
    /// needs, and hangs both when the awaited kernel waits for that peer ([`crate::cuda::settle_within`]).
    pub fn download<T, Src>(
        &self,
        stream: &std::sync::Arc<cudarc::driver::CudaStream>,
        src: &Src,
    ) -> Result<Vec<T>, Error>
    where
        T: cudarc::driver::DeviceRepr,
        Src: crate::launch::NcclBuffer<T> + cudarc::driver::DevicePtr<T>,
    {
        crate::graph::refuse_foreign_capture("download", stream)?;
        self.wait(stream, crate::cuda::SETTLE_TIMEOUT)?;
        Ok(stream.clone_dtoh(src)?)
    }

    /// A memory statistic (`ncclCommMemStats`, NCCL 2.29+).
    pub fn mem_stat(&self, stat: MemStat) -> Result<u64, Error> {
        // SAFETY: our live, initialised communicator.
        unsafe { result::comm_mem_stats(self.library(), self.raw(), stat.raw()) }
    }

    /// NCCL's description of a result code (`ncclGetErrorString`).
    pub fn error_string(&self, code: crate::ResultCode) -> String {
        result::error_string(self.library(), code.raw())
    }
}
