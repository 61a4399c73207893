//! Device communicators: `ncclDevCommCreate` from a [`Requirements`] builder, typed by capability set.
//!
//! [`Communicator::dev_comm`] is the single run-time capability check: it compares the requested set `C`
//! (LSA, GIN, multimem; markers from [`weft_device::caps`]) with the communicator's properties and refuses
//! what the communicator cannot do, with the reason. From then on a kernel that uses GIN only accepts a
//! `DevComm<C>` with `C: HasGin` — checked by rustc.
//!
//! The [`Requirements`] builder and [`Team`] are in `requirements.rs`; the memory `ncclDevCommCreate` reads and
//! writes, laid out for the loaded release, in `layout.rs`.

use std::marker::PhantomData;
use std::sync::Arc;

use weft_device::caps::{Capabilities, CapabilitySet};

use crate::abi::{Abi, RequirementsLayout};
use crate::comm::{Active, Communicator, Mode, Pending, Resolve};
use crate::error::Error;
use crate::group::{Completion, Group};
use crate::properties::GinType;
use crate::resources::{InUse, Liveness, Native, ResourceId, StreamsUsed};
use crate::result;
use crate::sys;

mod layout;
mod ll_a2a;
mod requirements;

pub(crate) use layout::DevCommStorage;
use layout::{new_layout, old_layout, DevCommOutputs, RawRequirements};
pub use ll_a2a::LlA2aHandle;
pub use requirements::{Requirements, Team};

/// A device communicator with capability set `C` (type state): the handle kernels receive, bound to its
/// communicator. Destroyed (`ncclDevCommDestroy`) on drop, once the kernels this rank launched with it have finished.
///
/// A launch takes it only with windows of the same communicator ([`Error::MixedCommunicators`] otherwise): its teams
/// are what a kernel indexes the windows' peers by.
pub struct DevComm<'comm, C: CapabilitySet, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    /// Set once NCCL has written the device communicator and it is registered; a `DevComm` without it is only ever
    /// inside a [`Pending`].
    id: Option<(ResourceId, Liveness)>,
    /// Everything NCCL reads or writes until the creation completed, on the heap, owned here.
    outputs: Box<DevCommOutputs>,
    completion: Completion,
    requirements: Requirements,
    /// The streams kernels taking this device communicator were launched on (a CUDA graph's replay stream among
    /// them): what its destruction waits for, here and in `close_all_resources` (which shares it).
    launches: Arc<StreamsUsed>,
    capabilities: PhantomData<C>,
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
    /// [`Pending`], reachable once NCCL has written it. Inside an NCCL group a blocking
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
    /// [`Pending`] until the outermost group ends (and, on a non-blocking communicator, until NCCL
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
        warn_if_many_barriers(requirements);
        let abi = Abi::for_release(self.library().version())?;
        let layout = abi.requirements()?;
        let props = self.properties()?;
        check_capabilities(C::CAPABILITIES, &props).map_err(|error| self.explain_missing_gin(error))?;
        requirements.check_version(&abi)?;
        requirements.check_against(self)?;
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
        let library = self.library();
        let ll_a2a = |blocks: u32, slots: u32, handle: &mut _, requirement: &mut _| {
            let count = |value: u32| {
                i32::try_from(value).map_err(|_| Error::invalid("requirements", "LL all-to-all counts exceed i32::MAX"))
            };
            result::ll_a2a_create_requirement(library, count(blocks)?, count(slots)?, handle, requirement)
        };
        let mut outputs = DevCommOutputs::new(&requirements, raw, dev_comm_size, ll_a2a)?;
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
            launches: Default::default(),
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
            let uses: Arc<dyn InUse> = self.launches.clone();
            let native = Native::DevComm(Box::new(self.outputs.dev_comm.clone()));
            self.id = Some(self.comm.register_tracked(native, Some(uses)));
            // Ranks sharing this GPU in this process go on together (placement::LocalGroup); never inside a group.
            self.comm.line_up("device communicator creation")?;
        }
        Ok(self)
    }
}

impl<S: crate::comm::Initialized, M: Mode> Communicator<S, M> {
    /// Adds to a missing-GIN error what this process can see of the cause: a GIN proxy backend asked for through
    /// `NCCL_RMA_PLUGIN` (weft's loopback, docs/gin.md) that NCCL did not enable because this GPU reads 0 for
    /// `CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED`, which NCCL requires of every rank for GIN.
    fn explain_missing_gin(&self, error: Error) -> Error {
        let Error::MissingCapability { capability: "GIN", reason } = error else { return error };
        let Some(plugin) = std::env::var_os("NCCL_RMA_PLUGIN").filter(|p| !p.is_empty()) else {
            return Error::MissingCapability { capability: "GIN", reason };
        };
        let attribute =
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED;
        let cause = match self.context().attribute(attribute) {
            Ok(0) => format!(
                "NCCL_RMA_PLUGIN={} asks for a GIN proxy backend, but this GPU reads 0 for \
                 CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, and NCCL enables GIN only where every \
                 rank's GPU reads 1",
                plugin.to_string_lossy()
            ),
            _ => format!(
                "NCCL_RMA_PLUGIN={} asks for a GIN proxy backend, which NCCL did not enable: check that the path is \
                 the loopback library (docs/gin.md) and, with NCCL_DEBUG=INFO, NCCL's \"RMA/Plugin\" lines",
                plugin.to_string_lossy()
            ),
        };
        Error::MissingCapability { capability: "GIN", reason: format!("{reason}; {cause}") }
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

impl<'comm, C: CapabilitySet, M: Mode> DevComm<'comm, C, M> {
    /// The `ncclDevComm` bytes NCCL wrote, as the kernel parameter expects them (the loaded release's size).
    /// Fails if `close_all_resources` destroyed the device communicator.
    pub fn kernel_arg_bytes(&self) -> Result<&[u8], Error> {
        match &self.id {
            Some((_, liveness)) => liveness.check("dev")?,
            None => return Err(Error::invalid("dev", "NCCL has not written this device communicator yet")),
        }
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

    /// Records that a kernel taking this device communicator is launched on `stream` (what its destruction waits
    /// for). Generated launchers call it; a raw launch should too.
    pub fn note_launch(&self, stream: &std::sync::Arc<cudarc::driver::CudaStream>) {
        self.launches.note(stream);
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
        self.id.as_ref()?;
        self.outputs.resource_handles.get(index).copied()
    }

    /// The multimem handle NCCL assigned to team requirement `index` (its 8 bytes, as a kernel argument
    /// passes them), if that team asked for one.
    pub fn team_multimem_handle(&self, index: usize) -> Option<[u8; 8]> {
        self.id.as_ref()?;
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

    /// The NCCL communicator it was created on, for the launch's check that a kernel's windows and device
    /// communicator belong to one ([`Error::MixedCommunicators`]).
    pub(crate) fn communicator_handle(&self) -> usize {
        self.comm.raw() as usize
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
        let Some((id, _)) = &self.id else {
            return self.drop_unresolved();
        };
        // A kernel this rank launched may still use it: wait for the last one before destroying. Never for the
        // whole device: on a shared GPU a peer's kernel may be waiting for this rank (docs/multi-rank.md).
        if let Err(error) = self.launches.wait() {
            // A kernel may still be using it: destroying it now would free its memory under that kernel. Leak it;
            // NCCL frees it with the communicator (abort or destroy).
            tracing::error!(
                %error,
                "waiting for the launches that used a device communicator failed; leaking it (the communicator's \
                 abort or destroy frees it)"
            );
            return;
        }
        if let Err(error) = self.comm.release_resource(*id) {
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

/// More LSA barriers than any GPU holds blocks at once (132 SMs × 32 blocks on an H200): a barrier per block of a
/// grid sized by the input (`LaunchConfig::for_elements`) rather than one wave asks for this many.
pub const MANY_BARRIERS: u32 = 4096;

/// Warns, once per process, when a device communicator is asked for more than [`MANY_BARRIERS`] LSA barriers.
fn warn_if_many_barriers(requirements: &Requirements) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if requirements.lsa_barriers > MANY_BARRIERS && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            barriers = requirements.lsa_barriers,
            "a device communicator with {} LSA barriers: that is one per block of a grid larger than any GPU runs at \
             once (a grid from LaunchConfig::for_elements on a large input?); each costs NCCL memory and a kernel's \
             blocks beyond one wave wait for the first wave anyway. Launch one wave (Communicator::one_wave, or the \
             kernel module's one_wave) and size the device communicator for it",
            requirements.lsa_barriers
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
