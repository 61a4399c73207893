//! `Config`: a typed builder over `ncclConfig_t`, laid out for the loaded library.
//!
//! `ncclConfig_t` grows by appending fields; NCCL reads `size` and `version` to know which fields the caller
//! filled. weft always builds the newest layout it knows, then declares the prefix the loaded library
//! understands (its `size`) and the loaded version. A field the loaded library lacks is never silently
//! dropped: setting it is [`Error::Unsupported`].

use std::ffi::CString;

use crate::abi::Abi;
use crate::error::Error;
use crate::sys::{self, ncclConfig_t};
use crate::version::Version;

/// NCCL's marker for "not set; use the library default".
const UNDEF_INT: i32 = i32::MIN;

/// The CTA policy of a communicator's kernels (`NCCL_CTA_POLICY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtaPolicy {
    /// NCCL's default.
    Default,
    /// Fewer CTAs, for better overlap with compute.
    Efficiency,
    /// Zero-CTA policy: use copy engines / symmetric kernels where possible.
    Zero,
}

impl CtaPolicy {
    fn raw(self) -> i32 {
        match self {
            CtaPolicy::Default => sys::NCCL_CTA_POLICY_DEFAULT as i32,
            CtaPolicy::Efficiency => sys::NCCL_CTA_POLICY_EFFICIENCY as i32,
            CtaPolicy::Zero => sys::NCCL_CTA_POLICY_ZERO as i32,
        }
    }
}

macro_rules! int_fields {
    ($( $(#[$doc:meta])* $setter:ident: $ty:ty => $field:ident since ($minor:literal, $patch:literal) ),* $(,)?) => {
        /// Integer-valued settings: (field name, value, first release).
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        struct IntFields { $( $setter: Option<i32>, )* }

        impl IntFields {
            fn apply(&self, raw: &mut ncclConfig_t, abi: &Abi) -> Result<(), Error> {
                $(
                    if let Some(value) = self.$setter {
                        require(abi, Version::new(2, $minor, $patch), concat!("ncclConfig_t.", stringify!($field)))?;
                        raw.$field = value;
                    }
                )*
                Ok(())
            }
        }

        impl Config {
            $(
                $(#[$doc])*
                pub fn $setter(mut self, value: $ty) -> Self {
                    self.ints.$setter = Some(value.into());
                    self
                }
            )*
        }
    };
}

/// A communicator configuration (`ncclConfig_t`). Unset fields keep NCCL's defaults.
///
/// Whether the communicator is blocking is not set here: it follows from the constructor
/// (`Communicator::init` or `Communicator::init_nonblocking`), so the type knows it.
///
/// ```
/// let config = weft_host::Config::new().comm_name("tp-group").max_ctas(16).split_share(true);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    ints: IntFields,
    cta_policy: Option<CtaPolicy>,
    net_name: Option<CString>,
    comm_name: Option<CString>,
}

int_fields! {
    /// Thread-block cluster size of NCCL's kernels (Hopper and later; 0 disables clusters).
    cga_cluster_size: i32 => cgaClusterSize since (14, 0),
    /// Fewest CTAs NCCL's kernels use.
    min_ctas: i32 => minCTAs since (14, 0),
    /// Most CTAs NCCL's kernels use.
    max_ctas: i32 => maxCTAs since (14, 0),
    /// Whether split communicators share the parent's resources.
    split_share: bool => splitShare since (18, 0),
    /// Network traffic class.
    traffic_class: i32 => trafficClass since (19, 0),
    /// Whether CollNet (in-network reduction) is enabled.
    collnet_enable: bool => collnetEnable since (23, 0),
    /// Whether shrunk communicators share the parent's resources.
    shrink_share: bool => shrinkShare since (27, 0),
    /// CTAs for NVLink SHARP (NVLS) algorithms.
    nvls_ctas: i32 => nvlsCTAs since (27, 0),
    /// Channels per network peer.
    channels_per_net_peer: i32 => nChannelsPerNetPeer since (28, 0),
    /// NVLink-centric scheduling.
    nvlink_centric_sched: bool => nvlinkCentricSched since (28, 0),
    /// CUDA-graph usage mode.
    graph_usage_mode: i32 => graphUsageMode since (29, 0),
    /// Number of RMA contexts.
    rma_contexts: i32 => numRmaCtx since (29, 0),
    /// Most point-to-point peers.
    max_p2p_peers: i32 => maxP2pPeers since (30, 0),
    /// Graph stream ordering.
    graph_stream_ordering: i32 => graphStreamOrdering since (30, 0),
    /// Implicit launch order.
    launch_order_implicit: bool => launchOrderImplicit since (31, 0),
    /// Number of RMA signals.
    rma_signals: i32 => numRmaSig since (31, 0),
    /// Eager RMA initialisation.
    rma_eager_init: bool => rmaEagerInit since (31, 0),
    /// Host CFT mode (`ncclHostCftMode_t`).
    host_cft_mode: i32 => hostCftMode since (31, 0),
    /// Host NVLS mode flags (`ncclNvlsHostMode_t`).
    nvls_host_mode: i32 => nvlsHostMode since (32, 0),
}

/// Whether the layout weft declares to the loaded release has the field `call`, added in `needs`.
fn require(abi: &Abi, needs: Version, call: &'static str) -> Result<(), Error> {
    if abi.declared.at_least(needs) {
        Ok(())
    } else if abi.found.at_least(needs) {
        // The release has the field, but it is newer than any release whose layout weft verified.
        Err(Error::UnverifiedRelease { found: abi.found, what: call.to_owned(), verified: crate::abi::verified_list() })
    } else {
        Err(Error::Unsupported { call, needs, found: abi.found })
    }
}

impl Config {
    /// A configuration with every field at NCCL's default.
    pub fn new() -> Config {
        Config::default()
    }

    /// Whether [`Config::max_ctas`] was set.
    pub(crate) fn sets_max_ctas(&self) -> bool {
        self.ints.max_ctas.is_some()
    }

    /// Whether [`Config::min_ctas`] was set.
    pub(crate) fn sets_min_ctas(&self) -> bool {
        self.ints.min_ctas.is_some()
    }

    /// The CTA policy (`CTAPolicy`).
    pub fn cta_policy(mut self, policy: CtaPolicy) -> Self {
        self.cta_policy = Some(policy);
        self
    }

    /// The network plugin/device to use (`netName`). Fails if `name` contains a NUL byte.
    pub fn net_name(mut self, name: &str) -> Self {
        self.net_name = CString::new(name).ok();
        self
    }

    /// A name for the communicator in NCCL's logs (`commName`). A name with a NUL byte is ignored.
    pub fn comm_name(mut self, name: &str) -> Self {
        self.comm_name = CString::new(name).ok();
        self
    }

    /// The raw struct for the loaded library, blocking or not. The returned value owns the strings the
    /// struct points to; keep it alive for as long as NCCL may read the config.
    pub(crate) fn to_raw(&self, found: Version, blocking: bool) -> Result<RawConfig, Error> {
        let abi = Abi::for_release(found)?;
        let mut raw = initializer(&abi);
        raw.blocking = i32::from(blocking);
        self.ints.apply(&mut raw, &abi)?;
        if let Some(policy) = self.cta_policy {
            require(&abi, Version::new(2, 27, 0), "ncclConfig_t.CTAPolicy")?;
            raw.CTAPolicy = policy.raw();
        }
        let strings = (self.net_name.clone(), self.comm_name.clone());
        if let Some(name) = &strings.0 {
            raw.netName = name.as_ptr();
        }
        if let Some(name) = &strings.1 {
            require(&abi, Version::new(2, 23, 0), "ncclConfig_t.commName")?;
            raw.commName = name.as_ptr();
        }
        Ok(RawConfig { raw: Box::new(raw), _strings: strings })
    }
}

/// An `ncclConfig_t` and the strings it points to, kept together (the box keeps the address stable).
pub(crate) struct RawConfig {
    raw: Box<ncclConfig_t>,
    _strings: (Option<CString>, Option<CString>),
}

impl RawConfig {
    pub(crate) fn as_mut_ptr(&mut self) -> *mut core::ffi::c_void {
        std::ptr::from_mut(&mut *self.raw).cast()
    }
}

/// `NCCL_CONFIG_INITIALIZER` for the loaded release: the newest layout, with `size` cut to the prefix the
/// release knows and `version` the release whose layout that is ([`crate::abi`]).
fn initializer(abi: &Abi) -> ncclConfig_t {
    ncclConfig_t {
        size: abi.layout.config,
        magic: sys::NCCL_API_MAGIC,
        version: abi.declared.code as u32,
        blocking: UNDEF_INT,
        cgaClusterSize: UNDEF_INT,
        minCTAs: UNDEF_INT,
        maxCTAs: UNDEF_INT,
        netName: std::ptr::null(),
        splitShare: UNDEF_INT,
        trafficClass: UNDEF_INT,
        commName: std::ptr::null(),
        collnetEnable: UNDEF_INT,
        CTAPolicy: UNDEF_INT,
        shrinkShare: UNDEF_INT,
        nvlsCTAs: UNDEF_INT,
        nChannelsPerNetPeer: UNDEF_INT,
        nvlinkCentricSched: UNDEF_INT,
        graphUsageMode: UNDEF_INT,
        numRmaCtx: UNDEF_INT,
        maxP2pPeers: UNDEF_INT,
        graphStreamOrdering: UNDEF_INT,
        launchOrderImplicit: UNDEF_INT,
        numRmaSig: UNDEF_INT,
        rmaEagerInit: UNDEF_INT,
        hostCftMode: UNDEF_INT,
        nvlsHostMode: UNDEF_INT,
    }
}

/// `sizeof(ncclConfig_t)` as weft declares it to release `found` (see [`crate::abi`]).
#[cfg(test)]
fn config_size(found: Version) -> Result<usize, Error> {
    Ok(Abi::for_release(found)?.layout.config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comm_name_nccl_keeps_a_pointer_to_moves_with_the_raw_config() {
        // NCCL stores config.commName as a pointer and reads it later; the communicator keeps the RawConfig.
        let raw = Config::new().comm_name("tp-group").to_raw(Version::new(2, 28, 9), true).unwrap();
        let pointer = raw.raw.commName;
        let kept = [raw];
        assert_eq!(kept[0].raw.commName, pointer);
        // SAFETY: `pointer` is the NUL-terminated commName owned by `kept[0]`, which is alive.
        let name = unsafe { std::ffi::CStr::from_ptr(pointer) };
        assert_eq!(name.to_str().unwrap(), "tp-group");
    }

    #[test]
    fn layout_sizes_match_each_release_header() {
        // sizeof(ncclConfig_t) as nvcc/gcc report it for each release's nccl.h on x86-64.
        assert_eq!(config_size(Version::new(2, 28, 9)).unwrap(), 80);
        assert_eq!(config_size(Version::new(2, 29, 7)).unwrap(), 88);
        assert_eq!(config_size(Version::new(2, 30, 7)).unwrap(), 96);
        assert_eq!(config_size(Version::new(2, 31, 2)).unwrap(), 112);
        assert_eq!(config_size(Version::new(2, 32, 3)).unwrap(), 120);
        assert!(matches!(config_size(Version::new(2, 27, 7)), Err(Error::Unsupported { .. })));
        // A release weft has not measured, before NCCL could say its layouts itself, is refused by name.
        assert!(matches!(config_size(Version::new(2, 30, 0)), Err(Error::UnverifiedRelease { .. })));
    }

    #[test]
    fn a_newer_release_gets_the_newest_verified_layout_declared_as_that_release() {
        let raw = Config::new().max_ctas(4).to_raw(Version::new(2, 33, 0), true).unwrap();
        assert_eq!((raw.raw.size, raw.raw.version), (120, 23203));
        assert_eq!(raw.raw.maxCTAs, 4);
        let verified = Config::new().to_raw(Version::new(2, 30, 4), true).unwrap();
        assert_eq!((verified.raw.size, verified.raw.version), (96, 23004));
    }

    #[test]
    fn fields_the_loaded_release_lacks_are_rejected_not_dropped() {
        let old = Version::new(2, 28, 9);
        let config = Config::new().max_ctas(8).comm_name("x");
        let raw = config.to_raw(old, false).unwrap();
        assert_eq!(raw.raw.maxCTAs, 8);
        assert_eq!(raw.raw.blocking, 0);
        assert_eq!(raw.raw.version, 22809);
        let too_new = Config::new().rma_signals(4).to_raw(old, true);
        match too_new {
            Err(Error::Unsupported { call, needs, found }) => {
                assert_eq!(call, "ncclConfig_t.numRmaSig");
                assert_eq!((needs, found), (Version::new(2, 31, 0), old));
            }
            other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
        }
        assert!(Config::new().rma_signals(4).to_raw(Version::new(2, 32, 3), true).is_ok());
        // 2.32.0 has nvlsHostMode, but weft declares 2.31.2's layout to it (2.32.0 is unverified): refused, not
        // written past the declared size.
        let beyond = Config::new().nvls_host_mode(1).to_raw(Version::new(2, 32, 0), true);
        assert!(matches!(beyond, Err(Error::UnverifiedRelease { .. })), "{:?}", beyond.map(|_| ()));
    }
}
