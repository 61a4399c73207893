//! What a communicator can do: `ncclCommQueryProperties` (2.29+), and on 2.28 what can be derived.

use std::fmt;

use crate::abi::{Abi, PropertiesLayout, BYTE_GIN_TYPE_OFFSET};
use crate::comm::{Communicator, Initialized, Mode};
use crate::error::Error;
use crate::result;
use crate::sys::{self, ncclCommProperties_t};

/// `sizeof(ncclCommProperties_t)` in 2.31, the first layout with `commHash` … `devCommRuntimeVersionSize`.
const RUNTIME_VERSION_PROPERTIES_SIZE: usize = 144;

/// The GPU-initiated networking backend (`ncclGinType_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GinType {
    /// No GIN: kernels cannot reach ranks outside their LSA team.
    None,
    /// A CPU proxy thread carries GIN operations.
    Proxy,
    /// GPUDirect Async Kernel-Initiated: the GPU drives the NIC directly.
    Gdaki,
    /// GPI backend.
    Gpi,
    /// AWS EFA GPUDirect Async.
    EfaGda,
    /// A value this build of weft does not know.
    Other(u32),
}

impl GinType {
    pub(crate) fn from_raw(raw: sys::ncclGinType_t) -> GinType {
        match raw {
            sys::ncclGinType_t::NCCL_GIN_TYPE_NONE => GinType::None,
            sys::ncclGinType_t::NCCL_GIN_TYPE_PROXY => GinType::Proxy,
            sys::ncclGinType_t::NCCL_GIN_TYPE_GDAKI => GinType::Gdaki,
            sys::ncclGinType_t::NCCL_GIN_TYPE_GPI => GinType::Gpi,
            sys::ncclGinType_t::NCCL_GIN_TYPE_EFA_GDA => GinType::EfaGda,
            other => GinType::Other(other.0),
        }
    }

    /// Whether a GIN backend is present.
    pub fn is_available(self) -> bool {
        self != GinType::None
    }
}

/// How GIN connections are laid out (`ncclGinConnectionType_t`, 2.31+).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GinConnectionType {
    /// No GIN connections.
    None,
    /// Every rank connects to every rank.
    Full,
    /// Ranks connect along rails.
    Rail,
    /// Ranks connect at a custom stride.
    CustomStride,
    /// A value this build of weft does not know.
    Other(u32),
}

impl GinConnectionType {
    fn from_raw(raw: sys::ncclGinConnectionType_t) -> GinConnectionType {
        match raw.0 {
            0 => GinConnectionType::None,
            1 => GinConnectionType::Full,
            2 => GinConnectionType::Rail,
            3 => GinConnectionType::CustomStride,
            other => GinConnectionType::Other(other),
        }
    }
}

/// A communicator's run-time properties.
///
/// `None` means the loaded NCCL cannot tell (fields newer than the library, or everything
/// `ncclCommQueryProperties` reports on 2.28, which lacks the call) — never a guess.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Properties {
    /// This rank.
    pub rank: usize,
    /// The number of ranks.
    pub nranks: usize,
    /// The CUDA device ordinal.
    pub cuda_device: usize,
    /// The NVML device index (2.29+).
    pub nvml_device: Option<usize>,
    /// Ranks in this rank's LSA team (reachable by load/store). Derived from `ncclTeamLsa` on every version.
    pub lsa_size: usize,
    /// Number of LSA teams (2.29+; derived as nranks / lsa_size on 2.28).
    pub lsa_teams: usize,
    /// Whether the device API (device communicators, symmetric windows in kernels) works (2.29+).
    pub device_api_support: Option<bool>,
    /// Whether NVLink multicast (multimem) is available (2.29+).
    pub multimem_support: Option<bool>,
    /// The GIN backend (2.29+).
    pub gin_type: Option<GinType>,
    /// Whether host-initiated RMA (put/signal) works (2.29+).
    pub host_rma_support: Option<bool>,
    /// The railed GIN backend (2.29+).
    pub railed_gin_type: Option<GinType>,
    /// A hash identifying the communicator (2.31+).
    pub comm_hash: Option<u64>,
    /// The smallest GIN stride (2.31+).
    pub gin_min_stride: Option<i32>,
    /// The GIN connection layout (2.31+).
    pub gin_connection_type: Option<GinConnectionType>,
    /// Every GIN backend the communicator supports (2.31+).
    pub gin_supported: Option<Vec<GinType>>,
    /// Size of `ncclDevComm` for run-time-versioned device code (2.31+).
    pub dev_comm_runtime_version_size: Option<usize>,
    /// Collective fabric transport support (2.32+).
    pub cft_support: Option<bool>,
    /// CFT multicast support (2.32+).
    pub cft_multicast_support: Option<bool>,
    /// CFT counted-operation support (2.32+).
    pub cft_counted_support: Option<bool>,
}

impl<S: Initialized, M: Mode> Communicator<S, M> {
    /// The communicator's run-time properties (queried each call; NCCL answers locally).
    pub fn properties(&self) -> Result<Properties, Error> {
        let library = self.library();
        let found = library.version();
        // SAFETY: `self` owns a live, initialised communicator.
        let lsa = unsafe { result::team_lsa(library, self.raw()) }?;
        let lsa_size = usize::try_from(lsa.nRanks).unwrap_or(0).max(1);
        let mut props = Properties {
            rank: self.rank(),
            nranks: self.nranks(),
            cuda_device: self.cuda_device(),
            nvml_device: None,
            lsa_size,
            lsa_teams: self.nranks() / lsa_size,
            device_api_support: None,
            multimem_support: None,
            gin_type: None,
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
        };
        let abi = Abi::for_release(found)?;
        let layout = abi.layout.properties;
        if layout == PropertiesLayout::Absent {
            return Ok(props);
        }
        let mut raw = zeroed_properties();
        // SAFETY: the offset lies inside `raw`; writing the byte in place makes it initialised whatever the moves
        // above did to padding, so `decode` may read it even if NCCL leaves it alone.
        unsafe { std::ptr::from_mut(&mut raw).cast::<u8>().add(BYTE_GIN_TYPE_OFFSET).write(0) };
        raw.size = layout.size();
        raw.magic = sys::NCCL_API_MAGIC;
        raw.version = abi.declared.code as u32;
        // SAFETY: live communicator; NCCL writes the layout of the declared release, `raw.size` bytes, a prefix
        // of `raw` (every verified layout is at most the newest one, which `raw` is).
        unsafe { result::comm_query_properties(library, self.raw(), &mut raw) }?;
        // What NCCL reports must match what weft read through the calls 2.28 has too (ncclCommUserRank, Count,
        // CuDevice): a mismatch means the struct layout weft assumed for this release is wrong.
        let reported = (raw.rank, raw.nRanks, raw.cudaDev);
        let known = (self.rank() as i32, self.nranks() as i32, self.cuda_device() as i32);
        if reported != known {
            return Err(Error::invalid(
                "properties",
                format!(
                    "ncclCommQueryProperties of NCCL {found} reports rank/nranks/device {reported:?}, but the \
                     communicator is {known:?}: weft's ncclCommProperties_t layout for this release is wrong; \
                     report it, and use an NCCL release weft lists in docs/host.md"
                ),
            ));
        }
        decode(&raw, layout, &mut props);
        Ok(props)
    }
}

/// An all-zero `ncclCommProperties_t`, padding included (2.29.2's one-byte `ginType` sits in what is padding in
/// the newest layout).
fn zeroed_properties() -> ncclCommProperties_t {
    let mut raw = std::mem::MaybeUninit::<ncclCommProperties_t>::uninit();
    // SAFETY: every byte, padding included, is zeroed in place; an all-zero ncclCommProperties_t is a valid value
    // (integers, bools, newtype enums).
    unsafe {
        raw.as_mut_ptr().write_bytes(0, 1);
        raw.assume_init()
    }
}

/// Fills `props` from what NCCL wrote into `raw` in `layout`; fields the layout lacks stay `None`.
fn decode(raw: &ncclCommProperties_t, layout: PropertiesLayout, props: &mut Properties) {
    props.nvml_device = usize::try_from(raw.nvmlDev).ok();
    props.device_api_support = Some(raw.deviceApiSupport);
    props.multimem_support = Some(raw.multimemSupport);
    let size = match layout {
        PropertiesLayout::Absent => return,
        PropertiesLayout::ByteGinType => {
            // SAFETY: the offset lies inside `raw` (checked by a test against the newest layout); the caller wrote
            // the byte in place before NCCL (which then writes it), so it is initialised. 2.29.2 and 2.29.3 store
            // ginType as one byte there, so it is read as a byte rather than through the field.
            let byte = unsafe { std::ptr::from_ref(raw).cast::<u8>().add(BYTE_GIN_TYPE_OFFSET).read() };
            props.gin_type = Some(GinType::from_raw(sys::ncclGinType_t(u32::from(byte))));
            return;
        }
        PropertiesLayout::Versioned { size } => size,
    };
    props.lsa_teams = usize::try_from(raw.nLsaTeams).unwrap_or(props.lsa_teams);
    props.gin_type = Some(GinType::from_raw(raw.ginType));
    props.host_rma_support = Some(raw.hostRmaSupport);
    props.railed_gin_type = Some(GinType::from_raw(raw.railedGinType));
    if size >= RUNTIME_VERSION_PROPERTIES_SIZE {
        props.comm_hash = Some(raw.commHash);
        props.gin_min_stride = Some(raw.ginMinStride);
        props.gin_connection_type = Some(GinConnectionType::from_raw(raw.ginConnectionType));
        props.gin_supported = Some(
            (0u32..)
                .zip(raw.ginSupport.iter())
                .filter(|(_, supported)| **supported)
                .map(|(index, _)| GinType::from_raw(sys::ncclGinType_t(index)))
                .collect(),
        );
        props.dev_comm_runtime_version_size = Some(raw.devCommRuntimeVersionSize);
    }
    if size >= std::mem::size_of::<ncclCommProperties_t>() {
        props.cft_support = Some(raw.cftSupport);
        props.cft_multicast_support = Some(raw.cftMulticastSupport);
        props.cft_counted_support = Some(raw.cftCountedSupport);
    }
}

fn show<T: fmt::Debug>(value: &Option<T>) -> String {
    value.as_ref().map_or_else(|| "unknown".to_owned(), |v| format!("{v:?}"))
}

impl fmt::Display for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}/{} on cuda:{} | LSA team {} ranks ({} teams) | device API {} | multimem {} | GIN {} (railed {}) | host RMA {}",
            self.rank,
            self.nranks,
            self.cuda_device,
            self.lsa_size,
            self.lsa_teams,
            show(&self.device_api_support),
            show(&self.multimem_support),
            show(&self.gin_type),
            show(&self.railed_gin_type),
            show(&self.host_rma_support),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_2_31_fields_end_where_2_31_s_layout_ends() {
        let end = std::mem::offset_of!(ncclCommProperties_t, cftSupport);
        assert_eq!(end.next_multiple_of(std::mem::align_of::<ncclCommProperties_t>()), RUNTIME_VERSION_PROPERTIES_SIZE);
    }

    fn blank() -> Properties {
        Properties {
            rank: 0,
            nranks: 2,
            cuda_device: 0,
            nvml_device: None,
            lsa_size: 2,
            lsa_teams: 1,
            device_api_support: None,
            multimem_support: None,
            gin_type: None,
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
    fn each_layout_reads_only_the_fields_its_release_writes() {
        let mut raw = zeroed_properties();
        raw.deviceApiSupport = true;
        raw.nLsaTeams = 3;
        raw.ginType = sys::ncclGinType_t(2);
        raw.devCommRuntimeVersionSize = 248;
        raw.cftSupport = true;

        // 2.29.2/2.29.3: a one-byte ginType at 34 (here GDAKI), nothing after it.
        let mut old = raw;
        // SAFETY: the offset lies inside `old`, a zero-initialised ncclCommProperties_t.
        unsafe { std::ptr::from_mut(&mut old).cast::<u8>().add(BYTE_GIN_TYPE_OFFSET).write(3) };
        let mut props = blank();
        decode(&old, PropertiesLayout::ByteGinType, &mut props);
        assert_eq!((props.gin_type, props.lsa_teams, props.host_rma_support), (Some(GinType::Gdaki), 1, None));
        assert_eq!(props.device_api_support, Some(true));

        let mut props = blank();
        decode(&raw, PropertiesLayout::Versioned { size: 56 }, &mut props);
        assert_eq!((props.gin_type, props.lsa_teams), (Some(GinType::Proxy), 3));
        assert_eq!(props.dev_comm_runtime_version_size, None, "2.30 has no devCommRuntimeVersionSize");

        let mut props = blank();
        decode(&raw, PropertiesLayout::Versioned { size: 144 }, &mut props);
        assert_eq!((props.dev_comm_runtime_version_size, props.cft_support), (Some(248), None));
        let mut props = blank();
        decode(&raw, PropertiesLayout::Versioned { size: 152 }, &mut props);
        assert_eq!(props.cft_support, Some(true));
    }

    #[test]
    fn unknown_gin_values_are_kept() {
        assert_eq!(GinType::from_raw(sys::ncclGinType_t(3)), GinType::Gdaki);
        assert_eq!(GinType::from_raw(sys::ncclGinType_t(42)), GinType::Other(42));
        assert!(!GinType::None.is_available());
    }
}
