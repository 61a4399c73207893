//! Communicator lifecycle, identity, status and memory registration.

use core::ffi::{c_int, c_void};

use super::{check, check_done, symbol, Progress};
use crate::error::Error;
use crate::sys::{self, ncclComm_t, Library};
use crate::version::{Version, V2_29};

const NULL_COMM: ncclComm_t = std::ptr::null_mut();

/// `ncclCommInitRankConfig`.
///
/// # Safety
/// The CUDA context of the device this rank uses is current on this thread; `config` points at a config
/// laid out for the loaded library's version (see `crate::config`) and lives until the call returns, and its
/// `commName` string as long as the communicator: NCCL keeps that pointer (2.30.7 reads it during
/// initialisation, which runs after the call returns on non-blocking communicators and inside groups).
pub unsafe fn comm_init_rank_config(
    library: &Library,
    nranks: c_int,
    id: &sys::ncclUniqueId,
    rank: c_int,
    config: *mut c_void,
) -> Result<(ncclComm_t, Progress), Error> {
    let init = symbol(library, &library.api.ncclCommInitRankConfig, "ncclCommInitRankConfig", Version::new(2, 14, 0))?;
    let mut comm = NULL_COMM;
    // SAFETY: NCCL reads the id by value and the config through the pointer the caller vouches for, and
    // writes the new handle into a live local.
    let status = unsafe { init(&mut comm, nranks, *id, rank, config.cast()) };
    let progress = check(library, "ncclCommInitRankConfig", status, comm)?;
    Ok((comm, progress))
}

/// `ncclCommInitRankScalable`: initialisation spread over several unique ids (one per root).
///
/// # Safety
/// As [`comm_init_rank_config`]; `ids` holds the same ids in the same order on every rank.
pub unsafe fn comm_init_rank_scalable(
    library: &Library,
    nranks: c_int,
    rank: c_int,
    ids: &mut [sys::ncclUniqueId],
    config: *mut c_void,
) -> Result<(ncclComm_t, Progress), Error> {
    let init =
        symbol(library, &library.api.ncclCommInitRankScalable, "ncclCommInitRankScalable", Version::new(2, 23, 0))?;
    let mut comm = NULL_COMM;
    let nids = c_int::try_from(ids.len()).map_err(|_| Error::invalid("ids", "more unique ids than fit in a C int"))?;
    // SAFETY: `ids` is a live slice of `nids` ids; the config pointer is vouched for by the caller.
    let status = unsafe { init(&mut comm, nranks, rank, nids, ids.as_mut_ptr(), config.cast()) };
    let progress = check(library, "ncclCommInitRankScalable", status, comm)?;
    Ok((comm, progress))
}

/// `ncclCommInitAll`: one communicator per listed device, in this process.
///
/// # Safety
/// `devices` are valid CUDA ordinals, each listed once.
pub unsafe fn comm_init_all(library: &Library, devices: &[c_int]) -> Result<Vec<ncclComm_t>, Error> {
    let init = symbol(library, &library.api.ncclCommInitAll, "ncclCommInitAll", Version::new(2, 0, 0))?;
    let ndev = c_int::try_from(devices.len()).map_err(|_| Error::invalid("devices", "too many devices"))?;
    let mut comms = vec![NULL_COMM; devices.len()];
    // SAFETY: `comms` has room for `ndev` handles and `devices` holds `ndev` ordinals.
    let status = unsafe { init(comms.as_mut_ptr(), ndev, devices.as_ptr()) };
    check_done(library, "ncclCommInitAll", status, NULL_COMM)?;
    Ok(comms)
}

macro_rules! comm_call {
    ($(#[$doc:meta])* $name:ident => $sym:ident since $needs:expr; $(($arg:ident : $ty:ty)),* ) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `comm` is a live communicator of this library, in a state where NCCL allows this call.
        pub unsafe fn $name(library: &Library, comm: ncclComm_t $(, $arg: $ty)*) -> Result<Progress, Error> {
            let f = symbol(library, &library.api.$sym, stringify!($sym), $needs)?;
            // SAFETY: the caller vouches for `comm`; the remaining arguments are plain values.
            let status = unsafe { f(comm $(, $arg)*) };
            check(library, stringify!($sym), status, comm)
        }
    };
}

comm_call!(/// `ncclCommFinalize`: flushes outstanding operations and releases shared resources.
    comm_finalize => ncclCommFinalize since Version::new(2, 18, 0););
comm_call!(/// `ncclCommDestroy`: frees the communicator's local resources.
    comm_destroy => ncclCommDestroy since Version::new(2, 0, 0););
comm_call!(/// `ncclCommAbort`: stops outstanding operations and frees the communicator without waiting for peers.
    comm_abort => ncclCommAbort since Version::new(2, 0, 0););
comm_call!(/// `ncclCommRevoke`: stops outstanding operations; the communicator may then only be shrunk, destroyed or aborted.
    comm_revoke => ncclCommRevoke since Version::new(2, 28, 0); (flags: c_int));
comm_call!(/// `ncclCommSuspend`: releases the communicator's suspendable resources (`NCCL_SUSPEND_MEM`).
    comm_suspend => ncclCommSuspend since V2_29; (flags: c_int));
comm_call!(/// `ncclCommResume`: reacquires what `ncclCommSuspend` released.
    comm_resume => ncclCommResume since V2_29;);

/// `ncclCommGetAsyncError`: the state of a non-blocking operation or an asynchronous failure.
///
/// Returns `Ok(Progress::Done)` when the communicator is idle and healthy, `Ok(Progress::InProgress)` while
/// an operation is still running, or the asynchronous error.
///
/// # Safety
/// `comm` is a live communicator of this library.
pub unsafe fn comm_get_async_error(library: &Library, comm: ncclComm_t) -> Result<Progress, Error> {
    let get = symbol(library, &library.api.ncclCommGetAsyncError, "ncclCommGetAsyncError", Version::new(2, 4, 0))?;
    let mut state = sys::ncclResult_t::ncclSuccess;
    // SAFETY: the caller vouches for `comm`; NCCL writes one result into a live local.
    let status = unsafe { get(comm, &mut state) };
    check_done(library, "ncclCommGetAsyncError", status, comm)?;
    check(library, "ncclCommGetAsyncError", state, comm)
}

macro_rules! comm_query {
    ($(#[$doc:meta])* $name:ident => $sym:ident since $needs:expr) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `comm` is a live, initialised communicator of this library.
        pub unsafe fn $name(library: &Library, comm: ncclComm_t) -> Result<c_int, Error> {
            let f = symbol(library, &library.api.$sym, stringify!($sym), $needs)?;
            let mut value = 0;
            // SAFETY: the caller vouches for `comm`; NCCL writes one int into a live local.
            let status = unsafe { f(comm, &mut value) };
            check_done(library, stringify!($sym), status, comm)?;
            Ok(value)
        }
    };
}

comm_query!(/// `ncclCommCount`: the number of ranks.
    comm_count => ncclCommCount since Version::new(2, 0, 0));
comm_query!(/// `ncclCommCuDevice`: the CUDA ordinal the communicator runs on.
    comm_cu_device => ncclCommCuDevice since Version::new(2, 0, 0));
comm_query!(/// `ncclCommUserRank`: this rank.
    comm_user_rank => ncclCommUserRank since Version::new(2, 0, 0));

/// `ncclCommSplit`. `color` of `NCCL_SPLIT_NOCOLOR` (-1) yields no communicator (a null handle).
///
/// NCCL writes the new handle into `*out` when the split completes, which on a non-blocking communicator is
/// after this call returned (it stores null first).
///
/// # Safety
/// As [`comm_init_rank_config`] for `config` (which may be null: inherit the parent's); `comm` live and active;
/// `out` is valid for writes until the parent reports the split complete (`ncclCommGetAsyncError`).
pub unsafe fn comm_split(
    library: &Library,
    comm: ncclComm_t,
    color: c_int,
    key: c_int,
    config: *mut c_void,
    out: *mut ncclComm_t,
) -> Result<Progress, Error> {
    let split = symbol(library, &library.api.ncclCommSplit, "ncclCommSplit", Version::new(2, 18, 0))?;
    // SAFETY: the caller vouches for `comm`, `config` and `out`.
    let status = unsafe { split(comm, color, key, out, config.cast()) };
    check(library, "ncclCommSplit", status, comm)
}

/// `ncclCommShrink`: a new communicator without the excluded ranks.
///
/// # Safety
/// As [`comm_split`] (including the life of `out`); `exclude` lists valid ranks of `comm`, the same on every
/// remaining rank.
pub unsafe fn comm_shrink(
    library: &Library,
    comm: ncclComm_t,
    exclude: &[c_int],
    config: *mut c_void,
    flags: c_int,
    out: *mut ncclComm_t,
) -> Result<Progress, Error> {
    let shrink = symbol(library, &library.api.ncclCommShrink, "ncclCommShrink", Version::new(2, 27, 0))?;
    let count = c_int::try_from(exclude.len()).map_err(|_| Error::invalid("exclude", "too many ranks"))?;
    // NCCL takes a mutable pointer but only reads the list; a copy keeps the caller's slice untouched.
    let mut exclude = exclude.to_vec();
    // SAFETY: `exclude` holds `count` ints; the caller vouches for `comm`, `config` and `out`.
    let status = unsafe { shrink(comm, exclude.as_mut_ptr(), count, out, config.cast(), flags) };
    check(library, "ncclCommShrink", status, comm)
}

/// `ncclCommGetUniqueId`: the id with which new ranks join `comm` through `ncclCommGrow`.
///
/// # Safety
/// `comm` is a live, active communicator of this library.
pub unsafe fn comm_get_unique_id(library: &Library, comm: ncclComm_t) -> Result<sys::ncclUniqueId, Error> {
    let get = symbol(library, &library.api.ncclCommGetUniqueId, "ncclCommGetUniqueId", V2_29)?;
    let mut id = sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: the caller vouches for `comm`; NCCL writes the id into a live local.
    let status = unsafe { get(comm, &mut id) };
    check_done(library, "ncclCommGetUniqueId", status, comm)?;
    Ok(id)
}

/// `ncclCommGrow`. Existing ranks pass `comm` and `rank = -1` (the root also `id`); new ranks pass a null
/// `comm`, the id and their assigned rank.
///
/// # Safety
/// As [`comm_split`] (including the life of `out`); the role arguments follow NCCL's table above.
pub unsafe fn comm_grow(
    library: &Library,
    comm: ncclComm_t,
    nranks: c_int,
    id: Option<&sys::ncclUniqueId>,
    rank: c_int,
    config: *mut c_void,
    out: *mut ncclComm_t,
) -> Result<Progress, Error> {
    let grow = symbol(library, &library.api.ncclCommGrow, "ncclCommGrow", V2_29)?;
    let id_ptr = id.map_or(std::ptr::null(), |id| id as *const _);
    // SAFETY: `id_ptr` is null or points at a live id; the caller vouches for `comm`, `config` and `out`.
    let status = unsafe { grow(comm, nranks, id_ptr, rank, out, config.cast()) };
    check(library, "ncclCommGrow", status, comm)
}

/// `ncclCommMemStats`.
///
/// # Safety
/// `comm` is a live communicator of this library.
pub unsafe fn comm_mem_stats(library: &Library, comm: ncclComm_t, stat: sys::ncclCommMemStat_t) -> Result<u64, Error> {
    let get = symbol(library, &library.api.ncclCommMemStats, "ncclCommMemStats", V2_29)?;
    let mut value = 0;
    // SAFETY: the caller vouches for `comm`; NCCL writes one u64 into a live local.
    let status = unsafe { get(comm, stat, &mut value) };
    check_done(library, "ncclCommMemStats", status, comm)?;
    Ok(value)
}

/// `ncclCommRegister`: registers `size` bytes at `buffer` for zero-copy collectives.
///
/// # Safety
/// `comm` live; `buffer..buffer+size` is device memory on the communicator's device that outlives the
/// registration.
pub unsafe fn comm_register(
    library: &Library,
    comm: ncclComm_t,
    buffer: *mut c_void,
    size: usize,
) -> Result<*mut c_void, Error> {
    let register = symbol(library, &library.api.ncclCommRegister, "ncclCommRegister", Version::new(2, 19, 0))?;
    let mut handle = std::ptr::null_mut();
    // SAFETY: the caller vouches for `comm` and the buffer; NCCL writes the handle into a live local.
    let status = unsafe { register(comm, buffer, size, &mut handle) };
    check_done(library, "ncclCommRegister", status, comm)?;
    Ok(handle)
}

/// `ncclCommDeregister`.
///
/// # Safety
/// `handle` came from [`comm_register`] on `comm` and no operation using it is in flight.
pub unsafe fn comm_deregister(library: &Library, comm: ncclComm_t, handle: *mut c_void) -> Result<(), Error> {
    let deregister = symbol(library, &library.api.ncclCommDeregister, "ncclCommDeregister", Version::new(2, 19, 0))?;
    // SAFETY: the caller vouches for `comm` and `handle`.
    let status = unsafe { deregister(comm, handle) };
    check_done(library, "ncclCommDeregister", status, comm)
}

/// `ncclCommWindowRegister`: a symmetric window over `size` bytes at `buffer`, collective over all ranks.
///
/// NCCL stores null into `*out` at once and the window when the registration runs: inside an NCCL group at the
/// outermost `ncclGroupEnd`, on a non-blocking communicator when the operation completes (it may then return
/// [`Progress::InProgress`]). A null window after completion means the communicator lacks symmetric-memory
/// support; the caller turns it into [`Error::MissingCapability`](crate::Error::MissingCapability).
///
/// # Safety
/// `comm` live; the buffer is `ncclMemAlloc` memory on the communicator's device that outlives the window; `out`
/// is valid for writes and stays allocated until the registration completed (the group ended, or the
/// communicator reports completion), and is not read before.
pub unsafe fn comm_window_register(
    library: &Library,
    comm: ncclComm_t,
    buffer: *mut c_void,
    size: usize,
    flags: c_int,
    out: *mut sys::ncclWindow_t,
) -> Result<Progress, Error> {
    let register =
        symbol(library, &library.api.ncclCommWindowRegister, "ncclCommWindowRegister", Version::new(2, 27, 0))?;
    // SAFETY: the caller vouches for `comm`, the buffer and the life of `out`.
    let status = unsafe { register(comm, buffer, size, out, flags) };
    check(library, "ncclCommWindowRegister", status, comm)
}

/// `ncclCommWindowDeregister`.
///
/// # Safety
/// `window` came from [`comm_window_register`] on `comm`; no kernel or operation using it is in flight.
pub unsafe fn comm_window_deregister(
    library: &Library,
    comm: ncclComm_t,
    window: sys::ncclWindow_t,
) -> Result<(), Error> {
    let deregister =
        symbol(library, &library.api.ncclCommWindowDeregister, "ncclCommWindowDeregister", Version::new(2, 27, 0))?;
    // SAFETY: the caller vouches for `comm` and `window`.
    let status = unsafe { deregister(comm, window) };
    check_done(library, "ncclCommWindowDeregister", status, comm)
}

/// `ncclRedOpCreatePreMulSum`: a reduction that multiplies each input by `scalar` before summing.
///
/// # Safety
/// `comm` live; `scalar` points at one element of `datatype`, in host memory for
/// `ncclScalarHostImmediate` or device memory that outlives the op for `ncclScalarDevice`.
pub unsafe fn red_op_create_pre_mul_sum(
    library: &Library,
    comm: ncclComm_t,
    scalar: *mut c_void,
    datatype: sys::ncclDataType_t,
    residence: sys::ncclScalarResidence_t,
) -> Result<sys::ncclRedOp_t, Error> {
    let create =
        symbol(library, &library.api.ncclRedOpCreatePreMulSum, "ncclRedOpCreatePreMulSum", Version::new(2, 11, 0))?;
    let mut op = sys::ncclRedOp_t(0);
    // SAFETY: the caller vouches for `comm` and `scalar`; NCCL writes the op into a live local.
    let status = unsafe { create(&mut op, scalar, datatype, residence, comm) };
    check_done(library, "ncclRedOpCreatePreMulSum", status, comm)?;
    Ok(op)
}

/// `ncclRedOpDestroy`.
///
/// # Safety
/// `op` came from [`red_op_create_pre_mul_sum`] on `comm` and no queued operation uses it.
pub unsafe fn red_op_destroy(library: &Library, comm: ncclComm_t, op: sys::ncclRedOp_t) -> Result<(), Error> {
    let destroy = symbol(library, &library.api.ncclRedOpDestroy, "ncclRedOpDestroy", Version::new(2, 11, 0))?;
    // SAFETY: the caller vouches for `comm` and `op`.
    let status = unsafe { destroy(op, comm) };
    check_done(library, "ncclRedOpDestroy", status, comm)
}
