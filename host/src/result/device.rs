//! The host half of NCCL's device API: properties, device communicators, teams, requirement builders and
//! host-side window pointer queries.

use core::ffi::{c_int, c_void};

use super::{check, check_done, symbol, Progress};
use crate::error::Error;
use crate::sys::{self, ncclComm_t, Library};
use crate::version::{Version, DEVICE_API, V2_29};

/// `ncclCommQueryProperties`.
///
/// # Safety
/// `comm` is a live communicator of this library; `properties` points at a `ncclCommProperties_t` whose
/// `size`/`magic`/`version` header is filled in for the loaded library (see `crate::properties`).
pub unsafe fn comm_query_properties(
    library: &Library,
    comm: ncclComm_t,
    properties: *mut sys::ncclCommProperties_t,
) -> Result<(), Error> {
    let query = symbol(library, &library.api.ncclCommQueryProperties, "ncclCommQueryProperties", V2_29)?;
    // SAFETY: the caller vouches for `comm` and the struct; NCCL writes at most `size` bytes into it.
    let status = unsafe { query(comm, properties) };
    check_done(library, "ncclCommQueryProperties", status, comm)
}

/// `ncclDevCommCreate`: collective over all ranks of `comm`.
///
/// NCCL copies the requirements at the call (2.30.7 deep-copies the struct and its lists) but writes `*out`, the
/// resource-buffer handles and the team multimem handles when the creation runs: inside an NCCL group at the
/// outermost `ncclGroupEnd`, on a non-blocking communicator when the operation completes (it may then return
/// [`Progress::InProgress`]).
///
/// # Safety
/// `comm` live and active; `requirements` points at a requirements struct laid out for the loaded version; it,
/// its lists and every `out*` pointer in them, and `out` (writable, 8-byte aligned, at least the `ncclDevComm`
/// size NCCL writes, `crate::abi`) stay allocated and unread until the creation completed (the group ended,
/// or the communicator reports completion).
pub unsafe fn dev_comm_create(
    library: &Library,
    comm: ncclComm_t,
    requirements: *const c_void,
    out: *mut c_void,
) -> Result<Progress, Error> {
    let create = symbol(library, &library.api.ncclDevCommCreate, "ncclDevCommCreate", DEVICE_API)?;
    // SAFETY: the caller vouches for every pointer and its life.
    let status = unsafe { create(comm, requirements.cast(), out.cast()) };
    check(library, "ncclDevCommCreate", status, comm)
}

/// `ncclDevCommDestroy`.
///
/// # Safety
/// `dev_comm` was created by [`dev_comm_create`] on `comm` and no kernel using it is running.
pub unsafe fn dev_comm_destroy(library: &Library, comm: ncclComm_t, dev_comm: *const c_void) -> Result<(), Error> {
    let destroy = symbol(library, &library.api.ncclDevCommDestroy, "ncclDevCommDestroy", DEVICE_API)?;
    // SAFETY: the caller vouches for both pointers.
    let status = unsafe { destroy(comm, dev_comm.cast()) };
    check_done(library, "ncclDevCommDestroy", status, comm)
}

macro_rules! team_of {
    ($(#[$doc:meta])* $name:ident => $sym:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `comm` is a live, initialised communicator of this library.
        pub unsafe fn $name(library: &Library, comm: ncclComm_t) -> Result<sys::ncclTeam_t, Error> {
            let f = symbol(library, &library.api.$sym, stringify!($sym), DEVICE_API)?;
            // SAFETY: the caller vouches for `comm`; the team is returned by value.
            Ok(unsafe { f(comm) })
        }
    };
}

team_of!(/// `ncclTeamWorld`: every rank.
    team_world => ncclTeamWorld);
team_of!(/// `ncclTeamLsa`: the ranks this one reaches by load/store (NVLink, same node).
    team_lsa => ncclTeamLsa);
team_of!(/// `ncclTeamRail`: the ranks with the same LSA rank in other LSA teams.
    team_rail => ncclTeamRail);

/// `ncclTeamRankToWorld`.
///
/// # Safety
/// `comm` is a live, initialised communicator of this library and `team` one of its teams.
pub unsafe fn team_rank_to_world(
    library: &Library,
    comm: ncclComm_t,
    team: sys::ncclTeam_t,
    rank: c_int,
) -> Result<c_int, Error> {
    let f = symbol(library, &library.api.ncclTeamRankToWorld, "ncclTeamRankToWorld", DEVICE_API)?;
    // SAFETY: the caller vouches for `comm` and `team`.
    Ok(unsafe { f(comm, team, rank) })
}

/// `ncclTeamRankToLsa`.
///
/// # Safety
/// As [`team_rank_to_world`].
pub unsafe fn team_rank_to_lsa(
    library: &Library,
    comm: ncclComm_t,
    team: sys::ncclTeam_t,
    rank: c_int,
) -> Result<c_int, Error> {
    let f = symbol(library, &library.api.ncclTeamRankToLsa, "ncclTeamRankToLsa", DEVICE_API)?;
    // SAFETY: the caller vouches for `comm` and `team`.
    Ok(unsafe { f(comm, team, rank) })
}

/// `ncclLsaBarrierCreateRequirement`: the resource a set of `count` LSA barriers over `team` needs.
pub fn lsa_barrier_create_requirement(
    library: &Library,
    team: sys::ncclTeam_t,
    count: c_int,
    handle: &mut sys::ncclLsaBarrierHandle_t,
    requirement: &mut sys::ncclDevResourceRequirements_t,
) -> Result<(), Error> {
    let f =
        symbol(library, &library.api.ncclLsaBarrierCreateRequirement, "ncclLsaBarrierCreateRequirement", DEVICE_API)?;
    // SAFETY: both out-pointers come from live exclusive references; the team is passed by value.
    let status = unsafe { f(team, count, handle, requirement) };
    check_done(library, "ncclLsaBarrierCreateRequirement", status, std::ptr::null_mut())
}

/// `ncclGinBarrierCreateRequirement`.
///
/// # Safety
/// `comm` is a live, initialised communicator of this library.
pub unsafe fn gin_barrier_create_requirement(
    library: &Library,
    comm: ncclComm_t,
    team: sys::ncclTeam_t,
    count: c_int,
    handle: &mut sys::ncclGinBarrierHandle_t,
    requirement: &mut sys::ncclDevResourceRequirements_t,
) -> Result<(), Error> {
    let f =
        symbol(library, &library.api.ncclGinBarrierCreateRequirement, "ncclGinBarrierCreateRequirement", DEVICE_API)?;
    // SAFETY: the caller vouches for `comm`; both out-pointers come from live exclusive references.
    let status = unsafe { f(comm, team, count, handle, requirement) };
    check_done(library, "ncclGinBarrierCreateRequirement", status, comm)
}

/// `ncclLLA2ACalcSlots`: slots an LL all-to-all needs for `max_elements` of `max_element_size` bytes.
pub fn ll_a2a_calc_slots(library: &Library, max_elements: c_int, max_element_size: c_int) -> Result<c_int, Error> {
    let f = symbol(library, &library.api.ncclLLA2ACalcSlots, "ncclLLA2ACalcSlots", DEVICE_API)?;
    // SAFETY: pure arithmetic on two ints.
    Ok(unsafe { f(max_elements, max_element_size) })
}

/// `ncclLLA2ACreateRequirement`.
pub fn ll_a2a_create_requirement(
    library: &Library,
    blocks: c_int,
    slots: c_int,
    handle: &mut sys::ncclLLA2AHandle_t,
    requirement: &mut sys::ncclDevResourceRequirements_t,
) -> Result<(), Error> {
    let f = symbol(library, &library.api.ncclLLA2ACreateRequirement, "ncclLLA2ACreateRequirement", DEVICE_API)?;
    // SAFETY: both out-pointers come from live exclusive references.
    let status = unsafe { f(blocks, slots, handle, requirement) };
    check_done(library, "ncclLLA2ACreateRequirement", status, std::ptr::null_mut())
}

/// `ncclGetLsaDevicePointer`: the device address of `offset` in LSA peer `lsa_rank`'s part of `window`.
///
/// # Safety
/// `window` is a live window of this library.
pub unsafe fn get_lsa_device_pointer(
    library: &Library,
    window: sys::ncclWindow_t,
    offset: usize,
    lsa_rank: c_int,
) -> Result<*mut c_void, Error> {
    let f = symbol(library, &library.api.ncclGetLsaDevicePointer, "ncclGetLsaDevicePointer", V2_29)?;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: the caller vouches for `window`; NCCL writes one pointer into a live local.
    let status = unsafe { f(window, offset, lsa_rank, &mut ptr) };
    check_done(library, "ncclGetLsaDevicePointer", status, std::ptr::null_mut())?;
    Ok(ptr)
}

/// `ncclWinGetUserPtr`: the local buffer a window was registered over.
///
/// # Safety
/// `comm` and `window` are live and belong together.
pub unsafe fn win_get_user_ptr(
    library: &Library,
    comm: ncclComm_t,
    window: sys::ncclWindow_t,
) -> Result<*mut c_void, Error> {
    let f = symbol(library, &library.api.ncclWinGetUserPtr, "ncclWinGetUserPtr", V2_29)?;
    let mut ptr = std::ptr::null_mut();
    // SAFETY: the caller vouches for both handles; NCCL writes one pointer into a live local.
    let status = unsafe { f(comm, window, &mut ptr) };
    check_done(library, "ncclWinGetUserPtr", status, comm)?;
    Ok(ptr)
}

/// The first release with host-side window pointer queries.
pub const HOST_POINTER_QUERIES: Version = V2_29;
