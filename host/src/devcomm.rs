//! Device communicators: `ncclDevCommCreate` from a [`Requirements`] builder, typed by capability set.
//!
//! [`Communicator::dev_comm`] is the single run-time capability check: it compares the requested set `C`
//! (LSA, GIN, multimem; markers from [`weft_device::caps`]) with the communicator's properties and refuses
//! what the communicator cannot do, with the reason. From then on a kernel that uses GIN only accepts a
//! `DevComm<C>` with `C: HasGin` — checked by rustc.

use std::marker::PhantomData;

use weft_device::caps::{Capabilities, CapabilitySet};

use crate::abi::{verified_list, Abi, RequirementsLayout};
use crate::comm::{Active, Communicator, Mode, Pending, Resolve};
use crate::error::Error;
use crate::group::{Completion, Group};
use crate::properties::{GinConnectionType, GinType};
use crate::resources::{Native, ResourceId};
use crate::result;
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

/// What a device communicator must provide: barriers, GIN signals and counters, LL all-to-all slots,
/// resource buffers, team multimem handles. Counts combine by maximum ([`Requirements::merge`]), so the
/// requirements of several kernels can share one `DevComm`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requirements {
    /// LSA barriers (`lsaBarrierCount`); a kernel indexing its barrier by block needs one per block.
    pub lsa_barriers: u32,
    /// Hybrid barriers: LSA + rail GIN (`barrierCount`).
    pub hybrid_barriers: u32,
    /// Rail GIN barriers (`railGinBarrierCount`).
    pub rail_gin_barriers: u32,
    /// World GIN barriers (`worldGinBarrierCount`, NCCL 2.30+).
    pub world_gin_barriers: u32,
    /// GIN signals, ids `0..n` (`ginSignalCount`).
    pub gin_signals: u32,
    /// GIN counters, ids `0..n` (`ginCounterCount`).
    pub gin_counters: u32,
    /// GIN contexts hint (`ginContextCount`; 0 leaves NCCL's default).
    pub gin_contexts: u32,
    /// GIN connection layout (`ginConnectionType`, NCCL 2.29+).
    pub gin_connection: Option<GinConnectionType>,
    /// LL all-to-all: (blocks, slots) (`lsaLLA2ABlockCount`, `lsaLLA2ASlotCount`).
    pub ll_a2a: Option<(u32, u32)>,
    /// Multimem on the LSA team (`lsaMultimem`).
    pub lsa_multimem: bool,
    /// Extra resource buffers: (bytes, alignment); their handles come back in [`DevComm::resource_buffer`].
    pub resource_buffers: Vec<(usize, usize)>,
    /// Teams the kernels use beyond world/LSA/rail, each with or without a multimem handle
    /// (`teamRequirementsList`); the handles come back in [`DevComm::team_multimem_handle`].
    pub teams: Vec<(Team, bool)>,
}

/// A team of ranks as NCCL describes it (`ncclTeam`): this rank's index in it, its size and the stride
/// between its members' world ranks. Get one from [`Communicator::team_world`], [`Communicator::team_lsa`] or
/// [`Communicator::team_rail`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Team {
    /// Ranks in the team.
    pub nranks: i32,
    /// This rank's index in the team.
    pub rank: i32,
    /// World-rank distance between consecutive members.
    pub stride: i32,
}

impl Team {
    fn from_raw(raw: sys::ncclTeam_t) -> Team {
        Team { nranks: raw.nRanks, rank: raw.rank, stride: raw.stride }
    }

    fn raw(self) -> sys::ncclTeam_t {
        sys::ncclTeam_t { nRanks: self.nranks, rank: self.rank, stride: self.stride }
    }
}

impl<S: crate::comm::Initialized, M: Mode> Communicator<S, M> {
    /// Every rank (`ncclTeamWorld`).
    pub fn team_world(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_world(self.library(), self.raw()) }?))
    }

    /// The ranks this one reaches by load/store (`ncclTeamLsa`).
    pub fn team_lsa(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_lsa(self.library(), self.raw()) }?))
    }

    /// The ranks with this rank's LSA index in the other LSA teams (`ncclTeamRail`).
    pub fn team_rail(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_rail(self.library(), self.raw()) }?))
    }

    /// The world rank of rank `rank` of `team` (`ncclTeamRankToWorld`).
    pub fn team_rank_to_world(&self, team: Team, rank: i32) -> Result<i32, Error> {
        if rank < 0 || rank >= team.nranks {
            return Err(Error::invalid("rank", format!("{rank} is not a rank of a team of {}", team.nranks)));
        }
        // SAFETY: our live, initialised communicator and a team value (NCCL only computes with it).
        unsafe { result::team_rank_to_world(self.library(), self.raw(), team.raw(), rank) }
    }
}

impl Requirements {
    /// Nothing required.
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// At least `count` LSA barriers.
    pub fn lsa_barriers(mut self, count: u32) -> Self {
        self.lsa_barriers = self.lsa_barriers.max(count);
        self
    }

    /// At least `count` hybrid (LSA + rail GIN) barriers.
    pub fn hybrid_barriers(mut self, count: u32) -> Self {
        self.hybrid_barriers = self.hybrid_barriers.max(count);
        self
    }

    /// At least `count` rail GIN barriers.
    pub fn rail_gin_barriers(mut self, count: u32) -> Self {
        self.rail_gin_barriers = self.rail_gin_barriers.max(count);
        self
    }

    /// At least `count` world GIN barriers (NCCL 2.30+).
    pub fn world_gin_barriers(mut self, count: u32) -> Self {
        self.world_gin_barriers = self.world_gin_barriers.max(count);
        self
    }

    /// At least `count` GIN signals.
    pub fn gin_signals(mut self, count: u32) -> Self {
        self.gin_signals = self.gin_signals.max(count);
        self
    }

    /// At least `count` GIN counters.
    pub fn gin_counters(mut self, count: u32) -> Self {
        self.gin_counters = self.gin_counters.max(count);
        self
    }

    /// A hint for the number of GIN contexts.
    pub fn gin_contexts(mut self, count: u32) -> Self {
        self.gin_contexts = self.gin_contexts.max(count);
        self
    }

    /// The GIN connection layout (NCCL 2.29+).
    pub fn gin_connection(mut self, kind: GinConnectionType) -> Self {
        self.gin_connection = Some(kind);
        self
    }

    /// LL all-to-all over `blocks` blocks with `slots` slots.
    pub fn ll_a2a(mut self, blocks: u32, slots: u32) -> Self {
        let (b, s) = self.ll_a2a.unwrap_or((0, 0));
        self.ll_a2a = Some((b.max(blocks), s.max(slots)));
        self
    }

    /// Multimem on the LSA team (when `enabled`).
    pub fn lsa_multimem(mut self, enabled: bool) -> Self {
        self.lsa_multimem |= enabled;
        self
    }

    /// A team the kernels use, with a multimem handle if `multimem`.
    pub fn team(mut self, team: Team, multimem: bool) -> Self {
        self.teams.push((team, multimem));
        self
    }

    /// One more resource buffer of `bytes` bytes aligned to `align`.
    pub fn resource_buffer(mut self, bytes: usize, align: usize) -> Self {
        self.resource_buffers.push((bytes, align));
        self
    }

    /// Both requirements: every count at its maximum, resource buffers of both.
    pub fn merge(mut self, other: &Requirements) -> Self {
        self.lsa_barriers = self.lsa_barriers.max(other.lsa_barriers);
        self.hybrid_barriers = self.hybrid_barriers.max(other.hybrid_barriers);
        self.rail_gin_barriers = self.rail_gin_barriers.max(other.rail_gin_barriers);
        self.world_gin_barriers = self.world_gin_barriers.max(other.world_gin_barriers);
        self.gin_signals = self.gin_signals.max(other.gin_signals);
        self.gin_counters = self.gin_counters.max(other.gin_counters);
        self.gin_contexts = self.gin_contexts.max(other.gin_contexts);
        self.gin_connection = self.gin_connection.or(other.gin_connection);
        if let Some((blocks, slots)) = other.ll_a2a {
            self = self.ll_a2a(blocks, slots);
        }
        self.lsa_multimem |= other.lsa_multimem;
        self.resource_buffers.extend_from_slice(&other.resource_buffers);
        for team in &other.teams {
            if !self.teams.contains(team) {
                self.teams.push(*team);
            }
        }
        self
    }

    /// Whether a device communicator created with `self` satisfies `needed`; otherwise an error naming the
    /// first shortfall and the fix.
    pub fn covers(&self, needed: &Requirements) -> Result<(), Error> {
        let counts = [
            ("LSA barriers", self.lsa_barriers, needed.lsa_barriers),
            ("hybrid barriers", self.hybrid_barriers, needed.hybrid_barriers),
            ("rail GIN barriers", self.rail_gin_barriers, needed.rail_gin_barriers),
            ("world GIN barriers", self.world_gin_barriers, needed.world_gin_barriers),
            ("GIN signals", self.gin_signals, needed.gin_signals),
            ("GIN counters", self.gin_counters, needed.gin_counters),
        ];
        for (what, have, need) in counts {
            if have < need {
                return Err(Error::invalid(
                    "dev",
                    format!(
                        "the device communicator has {have} {what} but the launch needs {need}: create it with \
                         the kernel's requirements (`kernel::requirements(&cfg)`) or a smaller grid"
                    ),
                ));
            }
        }
        let (have, need) = (self.ll_a2a.unwrap_or((0, 0)), needed.ll_a2a.unwrap_or((0, 0)));
        if have.0 < need.0 || have.1 < need.1 {
            return Err(Error::invalid(
                "dev",
                format!("LL all-to-all has {have:?} (blocks, slots), the launch needs {need:?}"),
            ));
        }
        if needed.lsa_multimem && !self.lsa_multimem {
            return Err(Error::invalid("dev", "the launch needs LSA multimem; request it in the requirements"));
        }
        Ok(())
    }

    /// Refuses fields the layout weft declares to the loaded release lacks (never silently dropped).
    fn check_version(&self, abi: &Abi) -> Result<(), Error> {
        let need = |used: bool, needs: Version, call: &'static str| match () {
            _ if !used || abi.declared.at_least(needs) => Ok(()),
            _ if abi.found.at_least(needs) => {
                Err(Error::UnverifiedRelease { found: abi.found, what: call.to_owned(), verified: verified_list() })
            }
            _ => Err(Error::Unsupported { call, needs, found: abi.found }),
        };
        // 2.29.2 and 2.29.3 end their requirements at ginCounterCount; 2.29.7 is the first measured with more.
        need(self.gin_connection.is_some(), Version::new(2, 29, 7), "ncclDevCommRequirements.ginConnectionType")?;
        need(self.world_gin_barriers > 0, Version::new(2, 30, 0), "ncclDevCommRequirements.worldGinBarrierCount")
    }
}

fn count(value: u32, what: &'static str) -> Result<i32, Error> {
    i32::try_from(value).map_err(|_| Error::invalid("requirements", format!("{what}: {value} exceeds i32::MAX")))
}

/// A device communicator with capability set `C` (type state): the handle kernels receive, bound to its
/// communicator. Destroyed (`ncclDevCommDestroy`) on drop.
pub struct DevComm<'comm, C: CapabilitySet, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    /// Set once NCCL has written the device communicator and it is registered; a `DevComm` without it is only ever
    /// inside a [`Pending`](crate::Pending).
    id: Option<ResourceId>,
    /// Everything NCCL reads or writes until the creation completed, on the heap, owned here.
    outputs: Box<DevCommOutputs>,
    completion: Completion,
    requirements: Requirements,
    /// Recorded after every launch that takes this device communicator: what its destruction waits for.
    last_use: Option<cudarc::driver::CudaEvent>,
    capabilities: PhantomData<C>,
}

/// What `ncclDevCommCreate` reads and writes: the device communicator, the resource-buffer and team multimem
/// handles it assigns, and the requirement struct and lists they are reached through. NCCL writes them at the end
/// of the creating group or when a non-blocking creation completes, so they live on the heap (a `Box` whose
/// vectors never grow), owned by the `DevComm`, and are read only after completion.
struct DevCommOutputs {
    dev_comm: DevCommStorage,
    resource_handles: Vec<sys::ncclDevResourceHandle_t>,
    multimem_handles: Vec<sys::ncclMultimemHandle_t>,
    resources: Vec<sys::ncclDevResourceRequirements_t>,
    teams: Vec<sys::ncclTeamRequirements_t>,
    raw: RawRequirements,
}

/// The requirements struct in the layout of the loaded release.
enum RawRequirements {
    Unversioned(v2_28::ncclDevCommRequirements),
    Versioned(sys::ncclDevCommRequirements_t),
    /// In the placeholder that replaces leaked outputs.
    Empty,
}

impl DevCommOutputs {
    /// Lays out `requirements` for NCCL, pointing every list and out-pointer into the returned box.
    fn new(requirements: &Requirements, raw: RawRequirements, dev_comm_size: usize) -> Box<DevCommOutputs> {
        let mut outputs = Box::new(DevCommOutputs {
            dev_comm: DevCommStorage::zeroed(dev_comm_size),
            resource_handles: vec![0; requirements.resource_buffers.len()],
            // SAFETY: an all-zero multimem handle is a valid "none yet" value (an opaque blob NCCL overwrites).
            multimem_handles: requirements.teams.iter().map(|_| unsafe { std::mem::zeroed() }).collect(),
            resources: Vec::with_capacity(requirements.resource_buffers.len()),
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
        outputs
    }

    /// Nothing: what a leaked `DevCommOutputs` is replaced with.
    fn empty() -> Box<DevCommOutputs> {
        Box::new(DevCommOutputs {
            dev_comm: DevCommStorage::zeroed(0),
            resource_handles: Vec::new(),
            multimem_handles: Vec::new(),
            resources: Vec::new(),
            teams: Vec::new(),
            raw: RawRequirements::Empty,
        })
    }

    fn requirements_ptr(&self) -> *const core::ffi::c_void {
        match &self.raw {
            RawRequirements::Versioned(raw) => std::ptr::from_ref(raw).cast(),
            RawRequirements::Unversioned(raw) => std::ptr::from_ref(raw).cast(),
            RawRequirements::Empty => std::ptr::null(),
        }
    }
}

impl<M: Mode> Communicator<Active, M> {
    /// Creates a device communicator offering capability set `C` with at least `requirements`
    /// (`ncclDevCommCreate`; collective over all ranks).
    ///
    /// This is where capabilities are checked, once: LSA needs device-API support, GIN a GIN backend,
    /// multimem NVLink SHARP support, each as [`properties`](Communicator::properties) reports it. On NCCL
    /// 2.28, which cannot report them, LSA is attempted and GIN and multimem are refused (a failed GIN
    /// attempt would poison the communicator for later device communicators).
    ///
    /// On a blocking communicator this returns the device communicator; on a non-blocking one a
    /// [`Pending`](crate::Pending), reachable once NCCL has written it. Inside an NCCL group a blocking
    /// communicator cannot return one (NCCL writes it when the group ends): that is an error naming
    /// [`dev_comm_in`](Communicator::dev_comm_in), which returns it pending.
    pub fn dev_comm<C: CapabilitySet>(&self, requirements: &Requirements) -> Result<M::Wrap<DevComm<'_, C, M>>, Error> {
        if M::BLOCKING && crate::group::in_group() {
            return Err(Error::invalid(
                "self",
                "inside an NCCL group, ncclDevCommCreate writes the device communicator only when the group ends: \
                 call `dev_comm_in(&group, ..)`, which returns a Pending device communicator to wait for after \
                 Group::end",
            ));
        }
        let dev = self.create_dev_comm(requirements)?;
        let dev = if M::BLOCKING { dev.finish()? } else { dev };
        Ok(M::wrap(dev, crate::result::Progress::Done))
    }

    /// [`dev_comm`](Communicator::dev_comm) inside an open NCCL group: the device communicator is
    /// [`Pending`](crate::Pending) until the outermost group ends (and, on a non-blocking communicator, until NCCL
    /// reports completion). Collective: every rank's creation must be in a group that ends.
    pub fn dev_comm_in<C: CapabilitySet>(
        &self,
        group: &Group,
        requirements: &Requirements,
    ) -> Result<Pending<DevComm<'_, C, M>>, Error> {
        let _open: &Group = group;
        Ok(Pending::new(self.create_dev_comm(requirements)?))
    }

    /// Checks, lays out and queues (or makes) the creation; `DevComm::finish` registers it once NCCL wrote it.
    fn create_dev_comm<C: CapabilitySet>(&self, requirements: &Requirements) -> Result<DevComm<'_, C, M>, Error> {
        let abi = Abi::for_release(self.library().version())?;
        let layout = abi.requirements()?;
        let props = self.properties()?;
        check_capabilities(C::CAPABILITIES, &props)?;
        requirements.check_version(&abi)?;
        let dev_comm_size = abi.dev_comm_size(props.dev_comm_runtime_version_size)?;
        let mut requirements = requirements.clone();
        if C::MULTIMEM {
            requirements.lsa_multimem = true;
        }
        let raw = match layout {
            RequirementsLayout::Versioned { size } => RawRequirements::Versioned(new_layout(
                &requirements,
                size,
                abi.declared,
                abi.layout.runtime_version,
                C::GIN,
            )?),
            _ => RawRequirements::Unversioned(old_layout(&requirements, C::GIN)?),
        };
        let mut outputs = DevCommOutputs::new(&requirements, raw, dev_comm_size);
        let last_use = Some(self.context().new_event(None)?);
        self.context().bind_to_thread()?;
        let (requirements_ptr, out) = (outputs.requirements_ptr(), outputs.dev_comm.as_mut_ptr());
        // SAFETY: our live, active communicator; the requirements are laid out and sized for the loaded release
        // (crate::abi), their lists and out-pointers point into `outputs`, and `out` has room for the ncclDevComm
        // NCCL writes (the declared release's size, or with useRuntimeVersion the size NCCL reported). `outputs`
        // is a Box owned by the DevComm below, freed only once NCCL has written it or leaked (an unresolved drop).
        let progress = unsafe { result::dev_comm_create(self.library(), self.raw(), requirements_ptr, out) }?;
        debug_assert!(progress == result::Progress::Done || !M::BLOCKING || crate::group::in_group());
        Ok(DevComm {
            comm: self,
            id: None,
            outputs,
            completion: Completion::new(self.library(), self.raw(), M::BLOCKING),
            requirements,
            last_use,
            capabilities: PhantomData,
        })
    }
}

impl<C: CapabilitySet, M: Mode> Resolve for DevComm<'_, C, M> {
    fn handles(&self) -> Vec<(&'static sys::Library, sys::ncclComm_t)> {
        if M::BLOCKING {
            Vec::new()
        } else {
            vec![(self.comm.library(), self.comm.raw())]
        }
    }

    fn awaits_group(&self) -> Result<bool, Error> {
        self.completion.awaits_group()
    }

    /// Registers the device communicator NCCL wrote.
    fn finish(mut self) -> Result<Self, Error> {
        if self.id.is_none() {
            self.completion.settle();
            self.id = Some(self.comm.register_resource(Native::DevComm(Box::new(self.outputs.dev_comm.clone()))));
            // Ranks sharing this GPU in this process go on together (placement::LocalGroup); never inside a group.
            self.comm.line_up("device communicator creation")?;
        }
        Ok(self)
    }
}

/// Refuses capabilities the properties say are missing (the one run-time capability check).
pub(crate) fn check_capabilities(wanted: Capabilities, props: &crate::Properties) -> Result<(), Error> {
    if (wanted.lsa || wanted.gin || wanted.multimem) && props.device_api_support == Some(false) {
        return Err(Error::MissingCapability {
            capability: "the device API",
            reason: "ncclCommQueryProperties reports no device-API support (needs CUDA VMM, and P2P or NVLink \
                     between the LSA team's GPUs)"
                .into(),
        });
    }
    if wanted.gin {
        match props.gin_type {
            Some(GinType::None) => {
                return Err(Error::MissingCapability {
                    capability: "GIN",
                    reason: format!(
                        "the communicator has no GIN backend (gin_type NONE; {} ranks, all in LSA teams of {}): GIN \
                         needs an RDMA NIC with GPUDirect (GDAKI) or the proxy backend; request a DevComm<Lsa> \
                         instead",
                        props.nranks, props.lsa_size
                    ),
                })
            }
            Some(_) => {}
            None => {
                return Err(Error::MissingCapability {
                    capability: "GIN",
                    reason: "NCCL 2.28 cannot report GIN support (ncclCommQueryProperties is 2.29+), and a GIN \
                             request it cannot satisfy leaves the communicator unable to create any further device \
                             communicator (seen with 2.28.9: every later ncclDevCommCreate fails with \"GIN not \
                             supported\"); use NCCL 2.29 or later for GIN"
                        .into(),
                })
            }
        }
    }
    if wanted.multimem && props.multimem_support != Some(true) {
        let reason = match props.multimem_support {
            Some(false) => "ncclCommQueryProperties reports no multimem support (needs NVLink SHARP; \
                            NCCL_NVLS_ENABLE may be 0)"
                .to_owned(),
            _ => format!(
                "NCCL {} cannot report multimem support (ncclCommQueryProperties is 2.29+)",
                props_version_hint()
            ),
        };
        return Err(Error::MissingCapability { capability: "multimem", reason });
    }
    Ok(())
}

fn props_version_hint() -> String {
    crate::sys::library().map(|l| l.version().to_string()).unwrap_or_else(|_| "?".into())
}

/// `ncclDevCommRequirements` in the 2.29+ layout: the newest layout, `size` bytes of it declared as release
/// `declared` (see [`crate::abi`]). With `runtime_version` (2.31+) NCCL writes the device communicator in the
/// loaded release's own layout, the one kernels compiled against its headers expect.
fn new_layout(
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
fn old_layout(req: &Requirements, gin: bool) -> Result<v2_28::ncclDevCommRequirements, Error> {
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

impl<'comm, C: CapabilitySet, M: Mode> DevComm<'comm, C, M> {
    /// The `ncclDevComm` bytes NCCL wrote, as the kernel parameter expects them (the loaded release's size).
    /// Fails if `close_all_resources` destroyed the device communicator.
    pub fn kernel_arg_bytes(&self) -> Result<&[u8], Error> {
        let id = self.id.ok_or_else(|| Error::invalid("dev", "NCCL has not written this device communicator yet"))?;
        self.comm.check_live(id, "dev")?;
        Ok(self.outputs.dev_comm.bytes())
    }

    /// The alignment `ncclDevComm` needs as a kernel parameter (for [`crate::launch::ArgBuffer::push_bytes`]).
    pub const KERNEL_ARG_ALIGN: usize = 8;

    /// Whether this device communicator belongs to the CUDA device of `stream`.
    pub fn check_stream(&self, stream: &cudarc::driver::CudaStream) -> Result<(), Error> {
        let device = stream.context().ordinal();
        if device == self.cuda_device() {
            Ok(())
        } else {
            Err(Error::invalid(
                "stream",
                format!(
                    "belongs to CUDA device {device}, but the device communicator to device {}",
                    self.cuda_device()
                ),
            ))
        }
    }

    /// A guard that records, once dropped after a launch on `stream` that takes this device communicator, that
    /// launch as its last use (what its destruction waits for).
    pub fn use_guard<'a>(&'a self, stream: &'a cudarc::driver::CudaStream) -> cudarc::driver::SyncOnDrop<'a> {
        cudarc::driver::SyncOnDrop::record_event(&self.last_use, stream)
    }

    /// What this device communicator was created with.
    pub fn requirements(&self) -> &Requirements {
        &self.requirements
    }

    /// The capability set, as a value.
    pub fn capabilities(&self) -> Capabilities {
        C::CAPABILITIES
    }

    /// The handle of resource buffer `index` (in the order of [`Requirements::resource_buffer`] calls).
    pub fn resource_buffer(&self, index: usize) -> Option<u32> {
        self.id?;
        self.outputs.resource_handles.get(index).copied()
    }

    /// The multimem handle NCCL assigned to team requirement `index` (its 8 bytes, as a kernel argument
    /// passes them), if that team asked for one.
    pub fn team_multimem_handle(&self, index: usize) -> Option<[u8; 8]> {
        self.id?;
        let handle = self.outputs.multimem_handles.get(index).map(|h| h._bindgen_opaque_blob.0);
        self.requirements.teams.get(index).filter(|(_, multimem)| *multimem).and(handle)
    }

    /// The communicator it belongs to.
    pub fn communicator(&self) -> &'comm Communicator<Active, M> {
        self.comm
    }

    /// The CUDA device ordinal it runs on.
    pub fn cuda_device(&self) -> usize {
        self.comm.cuda_device()
    }
}

impl<C: weft_device::caps::HasLsa, M: Mode> DevComm<'_, C, M> {
    /// LSA barriers available to kernels (indices `0..n`).
    pub fn lsa_barriers(&self) -> u32 {
        self.requirements.lsa_barriers
    }
}

impl<C: weft_device::caps::HasGin, M: Mode> DevComm<'_, C, M> {
    /// GIN signals available to kernels (ids `0..n`).
    pub fn gin_signals(&self) -> u32 {
        self.requirements.gin_signals
    }

    /// GIN counters available to kernels (ids `0..n`).
    pub fn gin_counters(&self) -> u32 {
        self.requirements.gin_counters
    }
}

impl<C: CapabilitySet, M: Mode> Drop for DevComm<'_, C, M> {
    fn drop(&mut self) {
        let Some(id) = self.id else {
            return self.drop_unresolved();
        };
        // A kernel this rank launched may still use it: wait for the last one before destroying. Never for the
        // whole device: on a shared GPU a peer's kernel may be waiting for this rank (docs/multi-rank.md).
        if let Some(Err(error)) = self.last_use.as_ref().map(cudarc::driver::CudaEvent::synchronize) {
            tracing::error!(%error, "waiting for the last launch before ncclDevCommDestroy failed");
        }
        if let Err(error) = self.comm.release_resource(id) {
            tracing::error!(%error, "ncclDevCommDestroy failed");
        }
    }
}

impl<C: CapabilitySet, M: Mode> DevComm<'_, C, M> {
    /// Drop of a device communicator that was never registered (a `Pending` dropped or failed): destroys it if
    /// NCCL has written it by now; leaks its outputs if NCCL may still write them (its group is open, or the
    /// creation still runs or failed without saying what it wrote).
    fn drop_unresolved(&mut self) {
        match self.completion.progress() {
            Ok(crate::result::Progress::Done) => {
                // SAFETY: NCCL created this device communicator on our communicator; it was never registered or
                // handed to a kernel.
                let destroyed = unsafe {
                    result::dev_comm_destroy(self.comm.library(), self.comm.raw(), self.outputs.dev_comm.as_ptr())
                };
                if let Err(error) = destroyed {
                    tracing::error!(%error, "ncclDevCommDestroy of an unresolved device communicator failed");
                }
            }
            outcome => {
                tracing::warn!(
                    error = outcome.err().map(|e| e.to_string()),
                    "dropped a device communicator NCCL has not written (its group is open, or its creation still \
                     runs or failed): leaking its storage, which NCCL may still write"
                );
                let outputs = std::mem::replace(&mut self.outputs, DevCommOutputs::empty());
                Box::leak(outputs);
            }
        }
    }
}

impl<C: CapabilitySet, M: Mode> std::fmt::Debug for DevComm<'_, C, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevComm").field("capabilities", &C::NAME).field("requirements", &self.requirements).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let req = Requirements::new().resource_buffer(4096, 256).resource_buffer(128, 128).team(team, true);
        let raw = RawRequirements::Versioned(new_layout(&req, 120, Version::new(2, 32, 3), true, false).unwrap());
        let outputs = DevCommOutputs::new(&req, raw, 248);
        // The DevComm moves (into a Pending, out of it); the box's contents do not.
        let moved = vec![outputs];
        let mut outputs = moved.into_iter().next().unwrap();
        let RawRequirements::Versioned(raw) = &outputs.raw else { unreachable!() };
        assert_eq!(outputs.requirements_ptr(), std::ptr::from_ref(raw).cast());
        assert_eq!(raw.resourceRequirementsList.cast_const(), std::ptr::from_ref(&outputs.resources[0]));
        assert_eq!(raw.teamRequirementsList.cast_const(), std::ptr::from_ref(&outputs.teams[0]));
        assert_eq!(outputs.resources[0].next.cast_const(), std::ptr::from_ref(&outputs.resources[1]));
        assert!(outputs.resources[1].next.is_null() && outputs.teams[0].next.is_null());
        // What NCCL does at the group's end: write the handles through the pointers it was given.
        let (first, second) = (outputs.resources[0].outBufferHandle, outputs.resources[1].outBufferHandle);
        let multimem = outputs.teams[0].outMultimemHandle;
        // SAFETY: each pointer points into `outputs`, alive and not otherwise borrowed here.
        unsafe {
            first.write(7);
            second.write(9);
            multimem.cast::<u8>().write(5);
            outputs.dev_comm.as_mut_ptr().cast::<u8>().write(1);
        }
        assert_eq!(outputs.resource_handles, [7, 9]);
        assert_eq!(outputs.multimem_handles[0]._bindgen_opaque_blob.0[0], 5);
        assert_eq!(outputs.dev_comm.bytes().len(), 248);
        assert_eq!(outputs.dev_comm.bytes()[0], 1);
    }

    #[test]
    fn merge_takes_maxima_and_covers_reports_shortfalls() {
        let a = Requirements::new().lsa_barriers(8).gin_signals(2);
        let b = Requirements::new().lsa_barriers(132).ll_a2a(4, 16);
        let both = a.clone().merge(&b);
        assert_eq!((both.lsa_barriers, both.gin_signals, both.ll_a2a), (132, 2, Some((4, 16))));
        assert!(both.covers(&a).is_ok() && both.covers(&b).is_ok());
        let team = Team { nranks: 8, rank: 3, stride: 1 };
        let with_team = a.clone().team(team, true).merge(&Requirements::new().team(team, true));
        assert_eq!(with_team.teams, vec![(team, true)], "merging keeps one entry per team");
        let err = a.covers(&b).unwrap_err().to_string();
        assert!(err.contains("8 LSA barriers") && err.contains("needs 132"), "{err}");
    }

    #[test]
    fn features_newer_than_the_library_are_unsupported() {
        let abi = |major, minor, patch| Abi::for_release(Version::new(major, minor, patch)).unwrap();
        let req = Requirements::new().world_gin_barriers(1);
        assert!(matches!(req.check_version(&abi(2, 29, 7)), Err(Error::Unsupported { .. })));
        assert!(req.check_version(&abi(2, 30, 7)).is_ok());
        // 2.29.2's requirements stop before ginConnectionType.
        let connection = Requirements::new().gin_connection(GinConnectionType::Rail);
        assert!(matches!(connection.check_version(&abi(2, 29, 3)), Err(Error::Unsupported { .. })));
        assert!(connection.check_version(&abi(2, 29, 7)).is_ok());
    }

    fn props(gin: Option<GinType>, multimem: Option<bool>, device_api: Option<bool>) -> crate::Properties {
        crate::Properties {
            rank: 0,
            nranks: 1,
            cuda_device: 0,
            nvml_device: None,
            lsa_size: 1,
            lsa_teams: 1,
            device_api_support: device_api,
            multimem_support: multimem,
            gin_type: gin,
            host_rma_support: None,
            railed_gin_type: None,
            comm_hash: None,
            gin_min_stride: None,
            gin_connection_type: None,
            gin_supported: None,
            dev_comm_runtime_version_size: None,
            cft_support: None,
            cft_multicast_support: None,
            cft_counted_support: None,
        }
    }

    #[test]
    fn the_capability_check_refuses_what_properties_deny() {
        let nvlink_only = props(Some(GinType::None), Some(false), Some(true));
        assert!(check_capabilities(Capabilities::LSA, &nvlink_only).is_ok());
        let gin = check_capabilities(Capabilities::GIN, &nvlink_only).unwrap_err();
        assert!(matches!(gin, Error::MissingCapability { capability: "GIN", .. }), "{gin}");
        assert!(check_capabilities(Capabilities::MULTIMEM, &nvlink_only).is_err());
        let no_api = props(Some(GinType::Proxy), Some(true), Some(false));
        assert!(check_capabilities(Capabilities::LSA, &no_api).is_err());
        // 2.28 cannot tell: LSA is attempted, GIN and multimem refused.
        let unknown = props(None, None, None);
        assert!(check_capabilities(Capabilities::LSA, &unknown).is_ok());
        assert!(check_capabilities(Capabilities::LSA.union(Capabilities::GIN), &unknown).is_err());
        assert!(check_capabilities(Capabilities::MULTIMEM, &unknown).is_err());
    }
}
