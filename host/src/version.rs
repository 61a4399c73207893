//! NCCL versions, and the release that introduced each call weft uses.

use std::fmt;

/// An NCCL release, as `ncclGetVersion` reports it (`code` = major·10000 + minor·100 + patch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// The integer NCCL reports and `NCCL_VERSION_CODE` holds (22809 for 2.28.9).
    pub code: i32,
}

impl Version {
    /// The version whose code is `code`.
    pub const fn from_code(code: i32) -> Version {
        Version { code }
    }

    /// The version `major.minor.patch`.
    pub const fn new(major: i32, minor: i32, patch: i32) -> Version {
        Version { code: major * 10000 + minor * 100 + patch }
    }

    /// The major release (2).
    pub const fn major(self) -> i32 {
        self.code / 10000
    }

    /// The minor release (28 in 2.28.9).
    pub const fn minor(self) -> i32 {
        self.code / 100 % 100
    }

    /// The patch release (9 in 2.28.9).
    pub const fn patch(self) -> i32 {
        self.code % 100
    }

    /// Whether this release is `other` or later.
    pub const fn at_least(self, other: Version) -> bool {
        self.code >= other.code
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major(), self.minor(), self.patch())
    }
}

/// The first release of the NCCL device API (device communicators, windows, teams). weft needs it.
pub const DEVICE_API: Version = Version::new(2, 28, 0);
/// The first release with the size/magic/version header on `ncclDevCommRequirements`,
/// `ncclCommQueryProperties`, suspend/resume and memory statistics.
pub const V2_29: Version = Version::new(2, 29, 0);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_round_trips_through_its_parts() {
        let v = Version::from_code(22809);
        assert_eq!((v.major(), v.minor(), v.patch()), (2, 28, 9));
        assert_eq!(v.to_string(), "2.28.9");
        assert_eq!(Version::new(2, 32, 3).code, 23203);
        assert!(Version::new(2, 32, 3).at_least(V2_29));
        assert!(!v.at_least(V2_29));
    }
}
