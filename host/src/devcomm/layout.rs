//! The memory `ncclDevCommCreate` reads and writes, laid out for the loaded release ([`crate::abi`]).

use super::Requirements;
use crate::error::Error;
use crate::properties::GinConnectionType;
use crate::sys::{self, v2_28};
use crate::version::Version;

/// Heap storage for one `ncclDevComm` of exactly the loaded release's size ([`crate::abi`]), 8-byte aligned as
/// the struct is. NCCL writes it (at the end of the creating group, or when a non-blocking creation completes);
/// kernels receive exactly these bytes.
#[derive(Clone)]
pub(crate) struct DevCommStorage {
    words: Box<[u64]>,
    size: usize,
}

impl DevCommStorage {
    /// Zeroed storage of `size` bytes.
    pub(crate) fn zeroed(size: usize) -> DevCommStorage {
        DevCommStorage { words: vec![0u64; size.div_ceil(8)].into_boxed_slice(), size }
    }

    pub(crate) fn as_ptr(&self) -> *const core::ffi::c_void {
        self.words.as_ptr().cast()
    }

    pub(crate) fn as_mut_ptr(&mut self) -> *mut core::ffi::c_void {
        self.words.as_mut_ptr().cast()
    }

    /// The `size` bytes, as the kernel parameter takes them.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `words` holds at least `size` initialised bytes (`size.div_ceil(8)` zeroed u64s, since written
        // only by NCCL with plain data), u8 has no alignment requirement, and the borrow of `self` keeps them alive.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.size) }
    }
}

impl std::fmt::Debug for DevCommStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DevCommStorage({} bytes)", self.size)
    }
}

/// What `ncclDevCommCreate` reads and writes: the device communicator, the resource-buffer and team multimem
/// handles it assigns, and the requirement struct and lists they are reached through. NCCL writes them at the end
/// of the creating group or when a non-blocking creation completes, so they live on the heap (a `Box` whose
/// vectors never grow), owned by the `DevComm`, and are read only after completion.
pub(super) struct DevCommOutputs {
    pub(super) dev_comm: DevCommStorage,
    /// The LL all-to-all handle (`ncclLLA2ACreateRequirement`): its slot count now, its resource buffer's handle
    /// written by NCCL through the last resource requirement. `None` without LL all-to-all requirements.
    pub(super) ll_a2a: Option<sys::ncclLLA2AHandle_t>,
    pub(super) resource_handles: Vec<sys::ncclDevResourceHandle_t>,
    pub(super) multimem_handles: Vec<sys::ncclMultimemHandle_t>,
    pub(super) resources: Vec<sys::ncclDevResourceRequirements_t>,
    pub(super) teams: Vec<sys::ncclTeamRequirements_t>,
    pub(super) raw: RawRequirements,
}

/// The requirements struct in the layout of the loaded release.
pub(super) enum RawRequirements {
    Unversioned(v2_28::ncclDevCommRequirements),
    Versioned(sys::ncclDevCommRequirements_t),
    /// In the placeholder that replaces leaked outputs.
    Empty,
}

impl DevCommOutputs {
    /// Lays out `requirements` for NCCL, pointing every list and out-pointer into the returned box. LL all-to-all
    /// requirements become one more resource requirement, from `ll_a2a` (`ncclLLA2ACreateRequirement` of the loaded
    /// library: NCCL sizes the buffer, and writes its handle into the box).
    pub(super) fn new(
        requirements: &Requirements,
        raw: RawRequirements,
        dev_comm_size: usize,
        ll_a2a: impl FnOnce(
            u32,
            u32,
            &mut sys::ncclLLA2AHandle_t,
            &mut sys::ncclDevResourceRequirements_t,
        ) -> Result<(), Error>,
    ) -> Result<Box<DevCommOutputs>, Error> {
        let ll = requirements.ll_a2a.filter(|&(blocks, slots)| blocks > 0 && slots > 0);
        let resources = requirements.resource_buffers.len() + usize::from(ll.is_some());
        let mut outputs = Box::new(DevCommOutputs {
            dev_comm: DevCommStorage::zeroed(dev_comm_size),
            ll_a2a: ll.map(|_| sys::ncclLLA2AHandle_t { _bindgen_opaque_blob: [0; 2] }),
            resource_handles: vec![0; requirements.resource_buffers.len()],
            // SAFETY: an all-zero multimem handle is a valid "none yet" value (an opaque blob NCCL overwrites).
            multimem_handles: requirements.teams.iter().map(|_| unsafe { std::mem::zeroed() }).collect(),
            resources: Vec::with_capacity(resources),
            teams: Vec::with_capacity(requirements.teams.len()),
            raw,
        });
        let out = &mut *outputs;
        // Vectors are filled to their capacity and never grow again: the pointers below stay valid.
        for (&(bytes, align), handle) in requirements.resource_buffers.iter().zip(out.resource_handles.iter_mut()) {
            out.resources.push(sys::ncclDevResourceRequirements_t {
                next: std::ptr::null_mut(),
                bufferSize: bytes,
                bufferAlign: align,
                outBufferHandle: handle,
                ginSignalCount: 0,
                ginCounterCount: 0,
                outGinSignalStart: std::ptr::null_mut(),
                outGinCounterStart: std::ptr::null_mut(),
            });
        }
        if let (Some((blocks, slots)), Some(handle)) = (ll, out.ll_a2a.as_mut()) {
            let mut requirement = sys::ncclDevResourceRequirements_t {
                next: std::ptr::null_mut(),
                bufferSize: 0,
                bufferAlign: 0,
                outBufferHandle: std::ptr::null_mut(),
                ginSignalCount: 0,
                ginCounterCount: 0,
                outGinSignalStart: std::ptr::null_mut(),
                outGinCounterStart: std::ptr::null_mut(),
            };
            // NCCL points the requirement's out-handle into `handle`, which lives in the box.
            ll_a2a(blocks, slots, handle, &mut requirement)?;
            out.resources.push(requirement);
        }
        for (&(team, multimem), handle) in requirements.teams.iter().zip(out.multimem_handles.iter_mut()) {
            out.teams.push(sys::ncclTeamRequirements_t {
                next: std::ptr::null_mut(),
                team: team.raw(),
                multimem,
                outMultimemHandle: handle,
            });
        }
        for i in 1..out.resources.len() {
            let next: *mut sys::ncclDevResourceRequirements_t = &mut out.resources[i];
            out.resources[i - 1].next = next;
        }
        for i in 1..out.teams.len() {
            let next: *mut sys::ncclTeamRequirements_t = &mut out.teams[i];
            out.teams[i - 1].next = next;
        }
        let list = out.resources.first_mut().map_or(std::ptr::null_mut(), |first| first as *mut _);
        let team_list = out.teams.first_mut().map_or(std::ptr::null_mut(), |first| first as *mut _);
        match &mut out.raw {
            RawRequirements::Versioned(raw) => {
                raw.resourceRequirementsList = list;
                raw.teamRequirementsList = team_list;
            }
            // The 2.28 lists have the same layout (56 and 32 bytes, measured), under 2.28's type names.
            RawRequirements::Unversioned(raw) => {
                raw.resourceRequirementsList = list.cast();
                raw.teamRequirementsList = team_list.cast();
            }
            RawRequirements::Empty => {}
        }
        Ok(outputs)
    }

    /// Nothing: what a leaked `DevCommOutputs` is replaced with.
    pub(super) fn empty() -> Box<DevCommOutputs> {
        Box::new(DevCommOutputs {
            dev_comm: DevCommStorage::zeroed(0),
            ll_a2a: None,
            resource_handles: Vec::new(),
            multimem_handles: Vec::new(),
            resources: Vec::new(),
            teams: Vec::new(),
            raw: RawRequirements::Empty,
        })
    }

    pub(super) fn requirements_ptr(&self) -> *const core::ffi::c_void {
        match &self.raw {
            RawRequirements::Versioned(raw) => std::ptr::from_ref(raw).cast(),
            RawRequirements::Unversioned(raw) => std::ptr::from_ref(raw).cast(),
            RawRequirements::Empty => std::ptr::null(),
        }
    }
}

/// A count as NCCL's `int`.
fn count(value: u32, what: &'static str) -> Result<i32, Error> {
    i32::try_from(value).map_err(|_| Error::invalid("requirements", format!("{what}: {value} exceeds i32::MAX")))
}

/// `ncclDevCommRequirements` in the 2.29+ layout: the newest layout, `size` bytes of it declared as release
/// `declared` (see [`crate::abi`]). With `runtime_version` (2.31+) NCCL writes the device communicator in the
/// loaded release's own layout, the one kernels compiled against its headers expect.
pub(super) fn new_layout(
    req: &Requirements,
    size: usize,
    declared: Version,
    runtime_version: bool,
    gin: bool,
) -> Result<sys::ncclDevCommRequirements_t, Error> {
    type R = sys::ncclDevCommRequirements_t;
    let (blocks, slots) = req.ll_a2a.unwrap_or((0, 0));
    Ok(R {
        size,
        magic: sys::NCCL_API_MAGIC,
        version: declared.code as u32,
        resourceRequirementsList: std::ptr::null_mut(),
        teamRequirementsList: std::ptr::null_mut(),
        lsaMultimem: req.lsa_multimem,
        barrierCount: count(req.hybrid_barriers, "hybrid barriers")?,
        lsaBarrierCount: count(req.lsa_barriers, "LSA barriers")?,
        railGinBarrierCount: count(req.rail_gin_barriers, "rail GIN barriers")?,
        lsaLLA2ABlockCount: count(blocks, "LL all-to-all blocks")?,
        lsaLLA2ASlotCount: count(slots, "LL all-to-all slots")?,
        ginForceEnable: gin,
        ginContextCount: if req.gin_contexts == 0 { 4 } else { count(req.gin_contexts, "GIN contexts")? },
        ginSignalCount: count(req.gin_signals, "GIN signals")?,
        ginCounterCount: count(req.gin_counters, "GIN counters")?,
        ginConnectionType: sys::ncclGinConnectionType_t(match req.gin_connection {
            None | Some(GinConnectionType::None) => 0,
            Some(GinConnectionType::Full) => 1,
            Some(GinConnectionType::Rail) => 2,
            Some(GinConnectionType::CustomStride) => 3,
            Some(GinConnectionType::Other(raw)) => raw,
        }),
        ginExclusiveContexts: false,
        ginQueueDepth: 0,
        ginTrafficClass: i32::MIN,
        worldGinBarrierCount: count(req.world_gin_barriers, "world GIN barriers")?,
        ginStrongSignalsRequired: true,
        ginVaSignalsRequired: true,
        ginCustomStride: 1,
        ginType: sys::ncclGinType_t::NCCL_GIN_TYPE_NONE,
        useRuntimeVersion: runtime_version,
        cftCaps: 0,
        cftBarrierCount: 0,
    })
}

/// `ncclDevCommRequirements` in the 2.28 layout (no header; zero means "none").
pub(super) fn old_layout(req: &Requirements, gin: bool) -> Result<v2_28::ncclDevCommRequirements, Error> {
    let (blocks, slots) = req.ll_a2a.unwrap_or((0, 0));
    Ok(v2_28::ncclDevCommRequirements {
        resourceRequirementsList: std::ptr::null_mut(),
        teamRequirementsList: std::ptr::null_mut(),
        lsaMultimem: req.lsa_multimem,
        barrierCount: count(req.hybrid_barriers, "hybrid barriers")?,
        lsaBarrierCount: count(req.lsa_barriers, "LSA barriers")?,
        railGinBarrierCount: count(req.rail_gin_barriers, "rail GIN barriers")?,
        lsaLLA2ABlockCount: count(blocks, "LL all-to-all blocks")?,
        lsaLLA2ASlotCount: count(slots, "LL all-to-all slots")?,
        ginForceEnable: gin,
        ginContextCount: count(req.gin_contexts, "GIN contexts")?,
        ginSignalCount: count(req.gin_signals, "GIN signals")?,
        ginCounterCount: count(req.gin_counters, "GIN counters")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::{Abi, RequirementsLayout};
    use crate::devcomm::Team;

    #[test]
    fn requirements_are_declared_as_the_layout_weft_fills() {
        let req = Requirements::new().lsa_barriers(4);
        let raw = |v: Version| {
            let abi = Abi::for_release(v).unwrap();
            let RequirementsLayout::Versioned { size } = abi.requirements().unwrap() else { panic!("{v}") };
            new_layout(&req, size, abi.declared, abi.layout.runtime_version, false).unwrap()
        };
        let fields = |r: sys::ncclDevCommRequirements_t| (r.size, r.version, r.useRuntimeVersion);
        assert_eq!(fields(raw(Version::new(2, 29, 3))), (72, 22903, false));
        assert_eq!(fields(raw(Version::new(2, 29, 7))), (88, 22907, false));
        assert_eq!(fields(raw(Version::new(2, 30, 7))), (96, 23007, false));
        assert_eq!(fields(raw(Version::new(2, 31, 2))), (120, 23102, true));
        assert_eq!(fields(raw(Version::new(2, 32, 3))), (120, 23203, true));
        // Newer than any verified release: 2.32.3's layout, declared as 2.32.3, NCCL writing its own devComm.
        assert_eq!(fields(raw(Version::new(2, 34, 1))), (120, 23203, true));
        assert_eq!(std::mem::size_of::<v2_28::ncclDevCommRequirements>(), 56);
        assert_eq!(raw(Version::new(2, 32, 3)).lsaBarrierCount, 4);
        assert_eq!(DevCommStorage::zeroed(200).bytes().len(), 200, "the kernel argument is exactly the size");
    }

    #[test]
    fn every_pointer_nccl_writes_through_points_into_the_heap_outputs_the_dev_comm_owns() {
        let team = Team { nranks: 2, rank: 0, stride: 1 };
        let req =
            Requirements::new().resource_buffer(4096, 256).resource_buffer(128, 128).team(team, true).ll_a2a(4, 16);
        let raw = RawRequirements::Versioned(new_layout(&req, 120, Version::new(2, 32, 3), true, false).unwrap());
        // What ncclLLA2ACreateRequirement does (2.30.7): the slot count into the handle, the buffer's handle out-pointer
        // at the handle's first word.
        let ll_a2a = |blocks: u32,
                      slots: u32,
                      handle: &mut sys::ncclLLA2AHandle_t,
                      req: &mut sys::ncclDevResourceRequirements_t| {
            handle._bindgen_opaque_blob[1] = slots;
            req.bufferSize = blocks as usize * (1 + 2 * slots as usize) * 16;
            req.bufferAlign = 16;
            req.outBufferHandle = handle._bindgen_opaque_blob.as_mut_ptr();
            Ok(())
        };
        let outputs = DevCommOutputs::new(&req, raw, 248, ll_a2a).unwrap();
        // The DevComm moves (into a Pending, out of it); the box's contents do not.
        let moved = vec![outputs];
        let mut outputs = moved.into_iter().next().unwrap();
        let RawRequirements::Versioned(raw) = &outputs.raw else { unreachable!() };
        assert_eq!(outputs.requirements_ptr(), std::ptr::from_ref(raw).cast());
        assert_eq!(raw.resourceRequirementsList.cast_const(), std::ptr::from_ref(&outputs.resources[0]));
        assert_eq!(raw.teamRequirementsList.cast_const(), std::ptr::from_ref(&outputs.teams[0]));
        assert_eq!(outputs.resources[0].next.cast_const(), std::ptr::from_ref(&outputs.resources[1]));
        assert_eq!(outputs.resources[1].next.cast_const(), std::ptr::from_ref(&outputs.resources[2]));
        assert!(outputs.resources[2].next.is_null() && outputs.teams[0].next.is_null());
        assert_eq!(outputs.resources[2].bufferSize, 4 * 33 * 16, "the LL all-to-all buffer is the last resource");
        // What NCCL does at the group's end: write the handles through the pointers it was given.
        let (first, second) = (outputs.resources[0].outBufferHandle, outputs.resources[1].outBufferHandle);
        let multimem = outputs.teams[0].outMultimemHandle;
        let ll = outputs.resources[2].outBufferHandle;
        // SAFETY: each pointer points into `outputs`, alive and not otherwise borrowed here.
        unsafe {
            first.write(7);
            second.write(9);
            ll.write(11);
            multimem.cast::<u8>().write(5);
            outputs.dev_comm.as_mut_ptr().cast::<u8>().write(1);
        }
        assert_eq!(outputs.resource_handles, [7, 9]);
        assert_eq!(outputs.ll_a2a.unwrap()._bindgen_opaque_blob, [11, 16], "NCCL's handle: buffer 11, 16 slots");
        assert_eq!(outputs.multimem_handles[0]._bindgen_opaque_blob.0[0], 5);
        assert_eq!(outputs.dev_comm.bytes().len(), 248);
        assert_eq!(outputs.dev_comm.bytes()[0], 1);
    }
}
