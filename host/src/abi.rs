//! Which struct layouts weft uses for the loaded NCCL, keyed on the exact releases weft has verified.
//!
//! NCCL's device-API structs changed layout between patch releases, not only between minor ones: 2.28.3's
//! `ncclDevCommRequirements` is 24 bytes (2.28.7: 56), 2.29.2's `ncclCommProperties_t` is 40 bytes with a
//! one-byte `ginType` (2.29.7: 56, a four-byte enum), and its `ncclDevComm` is 200 bytes (2.29.7: 224). A
//! layout guessed from the minor release alone would hand kernels a truncated or padded device communicator.
//! So every layout below was measured (`sizeof`/`offsetof` printed by nvcc, x86-64) from the headers of each
//! published release it names, and a release outside these ranges gets either
//!
//! - on 2.31 or a later 2.x, where NCCL reads a struct through its `size`/`magic`/`version` header and reports
//!   `ncclCommProperties_t.devCommRuntimeVersionSize`: the newest verified layout not newer than the release,
//!   declared as that verified release in the headers, with `useRuntimeVersion` so that NCCL writes the device
//!   communicator in the loaded release's own layout (the one the JIT compiles kernels against, headers and
//!   library being the same release), sized by NCCL's own report; or
//! - otherwise [`Error::UnverifiedRelease`], naming the release and the fix.
//!
//! The table lives in docs/host.md too ("One binary for NCCL 2.28 → 2.32").

use crate::error::Error;
use crate::version::{Version, DEVICE_API};

/// The layout of `ncclDevCommRequirements` a release expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequirementsLayout {
    /// 2.28.3's preview: 24 bytes, 32-byte resource requirements; weft does not build it.
    Preview,
    /// 2.28.7–2.28.9: no header, 56 bytes ([`crate::sys::v2_28`]).
    Unversioned,
    /// 2.29 on: the size/magic/version header, then a prefix of the newest layout `size` bytes long.
    Versioned {
        /// The bytes the release knows (its `sizeof`).
        size: usize,
    },
}

/// The layout of `ncclCommProperties_t` a release expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PropertiesLayout {
    /// 2.28: no `ncclCommQueryProperties`.
    Absent,
    /// 2.29.2–2.29.3: 40 bytes, `ginType` one byte at offset 34, nothing after it.
    ByteGinType,
    /// 2.29.7 on: a prefix of the newest layout `size` bytes long (`ginType` a four-byte enum at 36).
    Versioned {
        /// The bytes the release knows (its `sizeof`).
        size: usize,
    },
}

impl PropertiesLayout {
    /// The `size` weft declares in the header (0 when there is no call).
    pub(crate) fn size(self) -> usize {
        match self {
            PropertiesLayout::Absent => 0,
            PropertiesLayout::ByteGinType => BYTE_GIN_TYPE_PROPERTIES_SIZE,
            PropertiesLayout::Versioned { size } => size,
        }
    }
}

/// `sizeof(ncclCommProperties_t)` in 2.29.2 and 2.29.3.
pub(crate) const BYTE_GIN_TYPE_PROPERTIES_SIZE: usize = 40;
/// Where 2.29.2 and 2.29.3 put their one-byte `ginType`.
pub(crate) const BYTE_GIN_TYPE_OFFSET: usize = 34;

/// The struct layouts of a range of releases, all measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    /// The first release of the range (its headers were measured).
    pub(crate) first: Version,
    /// The last release of the range (measured, as was every published release between the two).
    pub(crate) last: Version,
    /// `sizeof(ncclConfig_t)`.
    pub(crate) config: usize,
    /// `ncclDevCommRequirements`.
    pub(crate) requirements: RequirementsLayout,
    /// `ncclCommProperties_t`.
    pub(crate) properties: PropertiesLayout,
    /// `sizeof(ncclDevComm)`, the kernel argument; `None` where weft cannot create device communicators.
    pub(crate) dev_comm: Option<usize>,
    /// Whether the release has `useRuntimeVersion` and `devCommRuntimeVersionSize` (2.31 on).
    pub(crate) runtime_version: bool,
}

const fn v(major: i32, minor: i32, patch: i32) -> Version {
    Version::new(major, minor, patch)
}

/// Every layout weft has verified, oldest first. The published releases with the device API are 2.28.3,
/// 2.28.7, 2.28.9, 2.29.2, 2.29.3, 2.29.7, 2.30.3, 2.30.4, 2.30.7, 2.31.2 and 2.32.3; each was measured.
pub(crate) const VERIFIED: &[Layout] = &[
    Layout {
        first: v(2, 28, 3),
        last: v(2, 28, 3),
        config: 80,
        requirements: RequirementsLayout::Preview,
        properties: PropertiesLayout::Absent,
        dev_comm: None,
        runtime_version: false,
    },
    Layout {
        first: v(2, 28, 7),
        last: v(2, 28, 9),
        config: 80,
        requirements: RequirementsLayout::Unversioned,
        properties: PropertiesLayout::Absent,
        dev_comm: Some(200),
        runtime_version: false,
    },
    Layout {
        first: v(2, 29, 2),
        last: v(2, 29, 3),
        config: 88,
        requirements: RequirementsLayout::Versioned { size: 72 },
        properties: PropertiesLayout::ByteGinType,
        dev_comm: Some(200),
        runtime_version: false,
    },
    Layout {
        first: v(2, 29, 7),
        last: v(2, 29, 7),
        config: 88,
        requirements: RequirementsLayout::Versioned { size: 88 },
        properties: PropertiesLayout::Versioned { size: 56 },
        dev_comm: Some(224),
        runtime_version: false,
    },
    Layout {
        first: v(2, 30, 3),
        last: v(2, 30, 7),
        config: 96,
        requirements: RequirementsLayout::Versioned { size: 96 },
        properties: PropertiesLayout::Versioned { size: 56 },
        dev_comm: Some(240),
        runtime_version: false,
    },
    Layout {
        first: v(2, 31, 2),
        last: v(2, 31, 2),
        config: 112,
        requirements: RequirementsLayout::Versioned { size: 120 },
        properties: PropertiesLayout::Versioned { size: 144 },
        dev_comm: Some(248),
        runtime_version: true,
    },
    Layout {
        first: v(2, 32, 3),
        last: v(2, 32, 3),
        config: 120,
        requirements: RequirementsLayout::Versioned { size: 120 },
        properties: PropertiesLayout::Versioned { size: 152 },
        dev_comm: Some(248),
        runtime_version: true,
    },
];

/// The first release whose structs NCCL reads through their version header and whose device communicator
/// size NCCL reports (`devCommRuntimeVersionSize`).
pub(crate) const RUNTIME_VERSION: Version = v(2, 31, 0);

/// The most bytes weft accepts as a device communicator (NCCL 2.32.3's is 248): a larger report is taken
/// for a broken library rather than allocated and passed to kernels.
pub(crate) const MAX_DEV_COMM_SIZE: usize = 16 * 1024;

/// The layouts weft uses with one loaded release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Abi {
    /// The release loaded.
    pub(crate) found: Version,
    /// The release written into the `version` field of every versioned struct: `found` itself when verified,
    /// else the verified release whose layout weft fills.
    pub(crate) declared: Version,
    /// The layouts.
    pub(crate) layout: Layout,
    /// Whether `found` lies in a verified range (else its layouts come from NCCL's version headers).
    pub(crate) verified: bool,
}

impl Abi {
    /// The layouts for release `found`, or why weft refuses it.
    pub(crate) fn for_release(found: Version) -> Result<Abi, Error> {
        if !found.at_least(DEVICE_API) {
            return Err(Error::Unsupported { call: "weft", needs: DEVICE_API, found });
        }
        if let Some(layout) = VERIFIED.iter().find(|l| l.first <= found && found <= l.last) {
            return Ok(Abi { found, declared: found, layout: *layout, verified: true });
        }
        // Within major release 2 only: a new major release is free to break what 2.x promised.
        if found.at_least(RUNTIME_VERSION) && found.major() == RUNTIME_VERSION.major() {
            // The newest verified layout not newer than `found`: NCCL reads older versioned structs.
            if let Some(layout) = VERIFIED.iter().rev().find(|l| l.runtime_version && l.last <= found) {
                return Ok(Abi { found, declared: layout.last, layout: *layout, verified: false });
            }
        }
        Err(Error::UnverifiedRelease { found, what: "its struct layouts".into(), verified: verified_list() })
    }

    /// The layout of the device-communicator requirements, or why weft cannot create device communicators
    /// with this release.
    pub(crate) fn requirements(&self) -> Result<RequirementsLayout, Error> {
        match self.layout.requirements {
            RequirementsLayout::Preview => Err(Error::UnverifiedRelease {
                found: self.found,
                what: "device communicators (its device-API preview has other ncclDevCommRequirements and \
                   ncclDevComm layouts)"
                    .into(),
                verified: verified_list(),
            }),
            layout => Ok(layout),
        }
    }

    /// `sizeof(ncclDevComm)` for kernels compiled against the loaded release's headers. `reported` is
    /// `ncclCommProperties_t.devCommRuntimeVersionSize` where the release has it (2.31 on).
    ///
    /// A verified release must report what weft measured (else weft's table is wrong, and it refuses rather
    /// than pass a mis-sized argument); a newer one is taken at its word, within [`MAX_DEV_COMM_SIZE`].
    pub(crate) fn dev_comm_size(&self, reported: Option<usize>) -> Result<usize, Error> {
        let mismatch = |reported: usize, expected: String| Error::UnverifiedRelease {
            found: self.found,
            what: format!(
                "device communicators (NCCL reports a {reported}-byte ncclDevComm, weft expected {expected})"
            ),
            verified: verified_list(),
        };
        let Some(measured) = self.layout.dev_comm else {
            return Err(self.requirements().err().unwrap_or_else(|| mismatch(0, "none".into())));
        };
        match (self.verified, self.layout.runtime_version, reported) {
            (true, true, Some(reported)) if reported != measured => Err(mismatch(reported, measured.to_string())),
            (true, _, _) => Ok(measured),
            (false, _, Some(reported)) if reported > 0 && reported <= MAX_DEV_COMM_SIZE => Ok(reported),
            (false, _, Some(reported)) => Err(mismatch(reported, format!("between 1 and {MAX_DEV_COMM_SIZE} bytes"))),
            (false, _, None) => Err(Error::UnverifiedRelease {
                found: self.found,
                what: "device communicators (it did not report devCommRuntimeVersionSize)".into(),
                verified: verified_list(),
            }),
        }
    }
}

/// The verified ranges, for messages: "2.28.3, 2.28.7–2.28.9, …".
pub(crate) fn verified_list() -> String {
    VERIFIED
        .iter()
        .map(|l| if l.first == l.last { l.first.to_string() } else { format!("{}–{}", l.first, l.last) })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;
    use crate::sys::{ncclCommProperties_t, ncclConfig_t, ncclDevCommRequirements_t};

    fn abi(major: i32, minor: i32, patch: i32) -> Result<Abi, Error> {
        Abi::for_release(v(major, minor, patch))
    }

    /// (release, sizeof ncclConfig_t, ncclDevCommRequirements, ncclCommProperties_t, ncclDevComm), as nvcc
    /// printed them from each published release's headers.
    type Measured = ((i32, i32, i32), usize, usize, usize, usize);
    const MEASURED: &[Measured] = &[
        ((2, 28, 7), 80, 56, 0, 200),
        ((2, 28, 9), 80, 56, 0, 200),
        ((2, 29, 2), 88, 72, 40, 200),
        ((2, 29, 3), 88, 72, 40, 200),
        ((2, 29, 7), 88, 88, 56, 224),
        ((2, 30, 3), 96, 96, 56, 240),
        ((2, 30, 4), 96, 96, 56, 240),
        ((2, 30, 7), 96, 96, 56, 240),
        ((2, 31, 2), 112, 120, 144, 248),
        ((2, 32, 3), 120, 120, 152, 248),
    ];

    #[test]
    fn each_published_release_maps_to_its_measured_layout() {
        for &((major, minor, patch), config, requirements, properties, dev_comm) in MEASURED {
            let abi = abi(major, minor, patch).unwrap();
            let release = v(major, minor, patch);
            assert!(abi.verified, "{release}");
            assert_eq!(abi.declared, release);
            assert_eq!(abi.layout.config, config, "{release}");
            let requirements_size = match abi.requirements().unwrap() {
                RequirementsLayout::Unversioned => size_of::<crate::sys::v2_28::ncclDevCommRequirements>(),
                RequirementsLayout::Versioned { size } => size,
                RequirementsLayout::Preview => unreachable!(),
            };
            assert_eq!(requirements_size, requirements, "{release}");
            assert_eq!(abi.layout.properties.size(), properties, "{release}");
            assert_eq!(abi.dev_comm_size(None).unwrap(), dev_comm, "{release}");
        }
    }

    #[test]
    fn the_2_28_3_preview_runs_communicators_but_refuses_device_communicators() {
        let abi = abi(2, 28, 3).unwrap();
        assert_eq!(abi.layout.config, 80);
        let refused = abi.requirements().unwrap_err();
        assert!(matches!(refused, Error::UnverifiedRelease { found, .. } if found == v(2, 28, 3)), "{refused}");
        assert!(abi.dev_comm_size(Some(88)).is_err());
        let text = refused.to_string();
        assert!(text.contains("2.28.3") && text.contains("2.32.3") && text.contains("NCCL_HOME"), "{text}");
    }

    #[test]
    fn unverified_releases_before_2_31_are_refused_by_name() {
        for (major, minor, patch) in [(2, 28, 5), (2, 29, 5), (2, 30, 0), (2, 30, 8)] {
            let error = abi(major, minor, patch).unwrap_err();
            let release = v(major, minor, patch);
            assert!(matches!(error, Error::UnverifiedRelease { found, .. } if found == release), "{error}");
            assert!(error.to_string().contains(&release.to_string()), "{error}");
        }
        assert!(matches!(abi(2, 27, 7), Err(Error::Unsupported { .. })));
        // A new major release is not assumed to keep 2.x's versioned structs.
        let major = abi(3, 0, 0).unwrap_err();
        assert!(matches!(major, Error::UnverifiedRelease { .. }) && major.to_string().contains("3.0.0"), "{major}");
    }

    #[test]
    fn newer_releases_declare_the_newest_verified_layout_and_take_the_device_communicator_size_from_nccl() {
        let newer = abi(2, 33, 1).unwrap();
        assert!(!newer.verified);
        assert_eq!(newer.declared, v(2, 32, 3));
        assert_eq!(newer.layout.config, 120);
        // Only NCCL's own report sizes the kernel argument; nothing is guessed.
        assert_eq!(newer.dev_comm_size(Some(264)).unwrap(), 264);
        assert!(matches!(newer.dev_comm_size(None), Err(Error::UnverifiedRelease { .. })));
        assert!(newer.dev_comm_size(Some(0)).is_err());
        assert!(newer.dev_comm_size(Some(MAX_DEV_COMM_SIZE + 1)).is_err());
        // A patch between two verified releases declares the older one.
        let between = abi(2, 32, 0).unwrap();
        assert_eq!((between.declared, between.verified), (v(2, 31, 2), false));
        assert_eq!(abi(2, 32, 4).unwrap().declared, v(2, 32, 3));
    }

    #[test]
    fn a_verified_release_that_reports_another_device_communicator_size_is_refused() {
        let known = abi(2, 32, 3).unwrap();
        assert_eq!(known.dev_comm_size(Some(248)).unwrap(), 248);
        let error = known.dev_comm_size(Some(256)).unwrap_err();
        assert!(error.to_string().contains("256-byte"), "{error}");
    }

    #[test]
    fn versioned_sizes_end_on_field_boundaries_of_the_newest_layout() {
        // Each release only appends: its size is where one of the newest layout's fields ends (rounded to the
        // struct's alignment), so filling the newest layout and declaring the release's size is exact.
        let end = |offset: usize, align: usize| offset.next_multiple_of(align);
        type R = ncclDevCommRequirements_t;
        let r = std::mem::align_of::<R>();
        assert_eq!(end(offset_of!(R, ginConnectionType), r), 72);
        assert_eq!(end(offset_of!(R, ginTrafficClass), r), 88);
        assert_eq!(end(offset_of!(R, ginCustomStride), r), 96);
        assert_eq!(size_of::<R>(), 120);
        type P = ncclCommProperties_t;
        let p = std::mem::align_of::<P>();
        assert_eq!(end(offset_of!(P, commHash), p), 56);
        assert_eq!(end(offset_of!(P, cftSupport), p), 144);
        assert_eq!(size_of::<P>(), 152);
        assert_eq!(BYTE_GIN_TYPE_OFFSET, offset_of!(P, multimemSupport) + 1);
        type C = ncclConfig_t;
        let c = std::mem::align_of::<C>();
        assert_eq!(end(offset_of!(C, graphUsageMode), c), 80);
        assert_eq!(end(offset_of!(C, maxP2pPeers), c), 88);
        assert_eq!(end(offset_of!(C, launchOrderImplicit), c), 96);
        assert_eq!(end(offset_of!(C, nvlsHostMode), c), 112);
        assert_eq!(size_of::<C>(), 120);
        assert_eq!(size_of::<crate::sys::ncclDevComm>(), 248);
    }
}
