//! Collectives, point-to-point and one-sided operations. All are enqueued on a CUDA stream and return
//! before the data moves.
//!
//! # Safety (every function here)
//! `comm` is a live, active communicator of this library; `stream` is a live stream of the context of the
//! communicator's device; every buffer is device memory on that device (or registered host memory NCCL
//! accepts), holds at least the element counts NCCL's documentation gives for the operation on this rank,
//! and stays allocated and untouched by other work until the operation completes on `stream`.

use core::ffi::{c_int, c_uint, c_void};

use super::{check, symbol, Progress};
use crate::error::Error;
use crate::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t, ncclWaitSignalDesc_t, ncclWindow_t, Library};
use crate::version::{Version, V2_29};

macro_rules! enqueue {
    ($(#[$doc:meta])* $name:ident => $sym:ident since $needs:expr; ($($arg:ident : $ty:ty),*)) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// See the module documentation.
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn $name(library: &Library, $($arg: $ty,)* comm: ncclComm_t, stream: cudaStream_t) -> Result<Progress, Error> {
            let f = symbol(library, &library.api.$sym, stringify!($sym), $needs)?;
            // SAFETY: the caller upholds the module-level contract for `comm`, `stream` and the buffers.
            let status = unsafe { f($($arg,)* comm, stream) };
            check(library, stringify!($sym), status, comm)
        }
    };
}

const BASE: Version = Version::new(2, 0, 0);
const ALL_TO_ALL: Version = Version::new(2, 28, 0);

enqueue!(/// `ncclAllReduce`.
    all_reduce => ncclAllReduce since BASE;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t));
enqueue!(/// `ncclBroadcast`.
    broadcast => ncclBroadcast since BASE;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int));
enqueue!(/// `ncclReduce`.
    reduce => ncclReduce since BASE;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t, op: ncclRedOp_t, root: c_int));
enqueue!(/// `ncclAllGather` (`send_count` elements from each rank).
    all_gather => ncclAllGather since BASE;
    (send: *const c_void, recv: *mut c_void, send_count: usize, datatype: ncclDataType_t));
enqueue!(/// `ncclReduceScatter` (`recv_count` elements to each rank).
    reduce_scatter => ncclReduceScatter since BASE;
    (send: *const c_void, recv: *mut c_void, recv_count: usize, datatype: ncclDataType_t, op: ncclRedOp_t));
enqueue!(/// `ncclAlltoAll` (`count` elements to and from each rank).
    all_to_all => ncclAlltoAll since ALL_TO_ALL;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t));
enqueue!(/// `ncclGather` (`count` elements from each rank to `root`).
    gather => ncclGather since ALL_TO_ALL;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int));
enqueue!(/// `ncclScatter` (`count` elements from `root` to each rank).
    scatter => ncclScatter since ALL_TO_ALL;
    (send: *const c_void, recv: *mut c_void, count: usize, datatype: ncclDataType_t, root: c_int));
enqueue!(/// `ncclSend`.
    send => ncclSend since Version::new(2, 7, 0);
    (send: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int));
enqueue!(/// `ncclRecv`.
    recv => ncclRecv since Version::new(2, 7, 0);
    (recv: *mut c_void, count: usize, datatype: ncclDataType_t, peer: c_int));
enqueue!(/// `ncclPutSignal`: one-sided write of `count` elements into `peer`'s window, then a signal.
    put_signal => ncclPutSignal since V2_29;
    (local: *const c_void, count: usize, datatype: ncclDataType_t, peer: c_int, peer_window: ncclWindow_t,
     peer_window_offset: usize, signal_index: c_int, context: c_int, flags: c_uint));
enqueue!(/// `ncclSignal`: a signal to `peer` without data.
    signal => ncclSignal since V2_29;
    (peer: c_int, signal_index: c_int, context: c_int, flags: c_uint));

/// `ncclWaitSignal`: waits on `stream` until the described signals have arrived.
///
/// # Safety
/// See the module documentation.
pub unsafe fn wait_signal(
    library: &Library,
    descriptors: &mut [ncclWaitSignalDesc_t],
    comm: ncclComm_t,
    stream: cudaStream_t,
) -> Result<Progress, Error> {
    let wait = symbol(library, &library.api.ncclWaitSignal, "ncclWaitSignal", V2_29)?;
    let count = c_int::try_from(descriptors.len()).map_err(|_| Error::invalid("descriptors", "too many"))?;
    // SAFETY: `descriptors` holds `count` live entries; the rest is the module-level contract.
    let status = unsafe { wait(count, descriptors.as_mut_ptr(), comm, stream) };
    check(library, "ncclWaitSignal", status, comm)
}
