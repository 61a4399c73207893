//! NCCL version codes: what `nccl.h` declares and what `ncclGetVersion` returns.

use std::fmt;

/// An NCCL release, e.g. 2.28.9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    /// Decodes an `NCCL_VERSION_CODE` / `ncclGetVersion` integer.
    ///
    /// NCCL changed the encoding at 2.9: releases up to 2.8 use `X*1000 + Y*100 + Z`
    /// (2708 is 2.7.8), later ones `X*10000 + Y*100 + Z` (22809 is 2.28.9). Every code of
    /// the new scheme is at least 20900 and every code of the old one is below 10000, so the
    /// magnitude alone says which scheme applies.
    pub fn from_code(code: u32) -> Self {
        if code >= 10_000 {
            Self { major: code / 10_000, minor: code % 10_000 / 100, patch: code % 100 }
        } else {
            Self { major: code / 1000, minor: code % 1000 / 100, patch: code % 100 }
        }
    }

    /// The integer NCCL itself would use for this release (its `NCCL_VERSION(X,Y,Z)` macro).
    pub fn code(self) -> u32 {
        if self.major <= 2 && self.minor <= 8 {
            self.major * 1000 + self.minor * 100 + self.patch
        } else {
            self.major * 10_000 + self.minor * 100 + self.patch
        }
    }

    /// Parses "2.28.9".
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.').map(|part| part.parse::<u32>().ok());
        let version = Self { major: parts.next()??, minor: parts.next()??, patch: parts.next()?? };
        parts.next().is_none().then_some(version)
    }

    /// The version as it appears in environment variable names: `2_28_9`.
    pub fn underscored(self) -> String {
        format!("{}_{}_{}", self.major, self.minor, self.patch)
    }
}

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Reads the version an `nccl.h` declares.
///
/// `NCCL_VERSION_CODE` is authoritative; headers old or unusual enough to lack it still
/// carry `NCCL_MAJOR`/`NCCL_MINOR`/`NCCL_PATCH`, from which the code is rebuilt.
pub fn version_code_from_header(header: &str) -> Option<u32> {
    let define = |wanted: &str| -> Option<u32> {
        header.lines().find_map(|line| {
            let directive = line.trim_start().strip_prefix('#')?.trim_start();
            let mut words = directive.strip_prefix("define")?.split_whitespace();
            if words.next()? != wanted {
                return None;
            }
            let value = words.next()?.trim_matches(|c| c == '(' || c == ')');
            value.parse().ok()
        })
    };
    define("NCCL_VERSION_CODE").or_else(|| {
        let version =
            NcclVersion { major: define("NCCL_MAJOR")?, minor: define("NCCL_MINOR")?, patch: define("NCCL_PATCH")? };
        Some(version.code())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NCCL_2_28_9_EXCERPT: &str = r#"
#ifndef NCCL_H_
#define NCCL_H_

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X,Y,Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
"#;

    #[test]
    fn reads_version_code_from_header() {
        assert_eq!(version_code_from_header(NCCL_2_28_9_EXCERPT), Some(22809));
    }

    #[test]
    fn version_macro_is_not_mistaken_for_the_code() {
        // NCCL_VERSION(X,Y,Z) starts with the same letters; only the exact name counts.
        let header = "#define NCCL_VERSION(X,Y,Z) ((X) * 10000)\n#define NCCL_VERSION_CODE 23203\n";
        assert_eq!(version_code_from_header(header), Some(23203));
    }

    #[test]
    fn tolerates_spaced_directives_and_parentheses() {
        assert_eq!(version_code_from_header("  #  define   NCCL_VERSION_CODE (23203)\n"), Some(23203));
    }

    #[test]
    fn falls_back_to_major_minor_patch() {
        let header = "#define NCCL_MAJOR 2\n#define NCCL_MINOR 7\n#define NCCL_PATCH 8\n";
        assert_eq!(version_code_from_header(header), Some(2708));
    }

    #[test]
    fn header_without_version_gives_none() {
        assert_eq!(version_code_from_header("#include <cuda_runtime.h>\n"), None);
        assert_eq!(version_code_from_header("#define NCCL_VERSION_CODE abc\n"), None);
    }

    #[test]
    fn decodes_both_code_schemes() {
        assert_eq!(NcclVersion::from_code(22809).to_string(), "2.28.9");
        assert_eq!(NcclVersion::from_code(23203).to_string(), "2.32.3");
        assert_eq!(NcclVersion::from_code(21803).to_string(), "2.18.3");
        assert_eq!(NcclVersion::from_code(2708).to_string(), "2.7.8");
    }

    #[test]
    fn code_round_trips() {
        for code in [2708, 20903, 22809, 22903, 23203] {
            assert_eq!(NcclVersion::from_code(code).code(), code);
        }
    }

    #[test]
    fn parses_dotted_versions() {
        let version = NcclVersion::parse("2.32.3").unwrap();
        assert_eq!(version.code(), 23203);
        assert_eq!(version.underscored(), "2_32_3");
        assert_eq!(NcclVersion::parse("2.32"), None);
        assert_eq!(NcclVersion::parse("2.32.3.1"), None);
        assert_eq!(NcclVersion::parse("2.x.3"), None);
    }
}
