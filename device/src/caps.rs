//! Capability sets: which parts of NCCL's device API a device communicator offers.
//!
//! A device communicator is created on the host with some set of capabilities — LSA (load/store access to peers'
//! memory over NVLink or PCIe), GIN (GPU-initiated networking) and multimem (NVLink SHARP multicast) — and checked
//! once, at run time, when `weft_host` turns it into a `DevComm<C>`. From then on the set is the type parameter
//! `C`, a zero-sized marker from this module (a *type state*), and everything else is checked by rustc: the
//! device-side [`DevComm`](crate::DevComm) offers LSA items only when `C: HasLsa`, GIN items only when `C: HasGin`,
//! multimem items only when `C: HasMultimem`, and the launcher `#[weft::kernel]` generates accepts only
//! communicators whose set includes what the kernel uses.
//!
//! If you meet these types in a compiler error such as "the trait `HasGin` is not implemented for `Lsa`": the
//! kernel uses a GIN item but was declared (or launched) with a communicator that only has LSA. Declare the
//! kernel's parameter as `&DevComm<LsaGin>` and create the communicator with GIN.

use core::fmt;

mod sealed {
    pub trait Sealed {}
}

/// A set of capabilities, as a type (implemented by the markers of this module only).
pub trait CapabilitySet: sealed::Sealed + Copy + Default + fmt::Debug + Send + Sync + 'static {
    /// Whether the set includes LSA.
    const LSA: bool;
    /// Whether the set includes GIN.
    const GIN: bool;
    /// Whether the set includes multimem.
    const MULTIMEM: bool;
    /// The marker's name, for messages (`"LsaGin"`).
    const NAME: &'static str;
    /// The same set as a value.
    const CAPABILITIES: Capabilities = Capabilities { lsa: Self::LSA, gin: Self::GIN, multimem: Self::MULTIMEM };
}

/// Implemented by every capability set that includes LSA (load/store access to the peers of the LSA team).
pub trait HasLsa: CapabilitySet {}
/// Implemented by every capability set that includes GIN (GPU-initiated networking).
pub trait HasGin: CapabilitySet {}
/// Implemented by every capability set that includes multimem (NVLink SHARP multicast on the LSA team).
pub trait HasMultimem: CapabilitySet {}

macro_rules! capability_set {
    ($(#[$doc:meta])* $name:ident: lsa = $lsa:literal, gin = $gin:literal, multimem = $mm:literal; $($has:ident),*) => {
        $(#[$doc])*
        ///
        /// (type state) A zero-sized marker used as `DevComm<C>`'s `C`.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name;
        impl sealed::Sealed for $name {}
        impl CapabilitySet for $name {
            const LSA: bool = $lsa;
            const GIN: bool = $gin;
            const MULTIMEM: bool = $mm;
            const NAME: &'static str = stringify!($name);
        }
        $(impl $has for $name {})*
    };
}

capability_set!(
    /// LSA only: peers reached by loads and stores (NVLink/PCIe), LSA barriers, LSA reduce-copy, LL all-to-all.
    Lsa: lsa = true, gin = false, multimem = false; HasLsa
);
capability_set!(
    /// GIN only: one-sided puts, signals and counters over the network, GIN barriers.
    Gin: lsa = false, gin = true, multimem = false; HasGin
);
capability_set!(
    /// Multimem only: NVLink SHARP multicast loads, stores and reductions on the LSA team.
    Multimem: lsa = false, gin = false, multimem = true; HasMultimem
);
capability_set!(
    /// LSA and GIN: everything of both, plus hybrid (LSA + rail GIN) barriers.
    LsaGin: lsa = true, gin = true, multimem = false; HasLsa, HasGin
);
capability_set!(
    /// LSA and multimem.
    LsaMultimem: lsa = true, gin = false, multimem = true; HasLsa, HasMultimem
);
capability_set!(
    /// LSA, GIN and multimem: the whole device API.
    LsaGinMultimem: lsa = true, gin = true, multimem = true; HasLsa, HasGin, HasMultimem
);

/// A set of capabilities as a value: what a kernel uses (the generated `CAPABILITIES` constant) or what a
/// communicator offers (queried at run time).
///
/// ```
/// use weft_device::caps::{Capabilities, CapabilitySet, LsaGin};
/// const USED: Capabilities = Capabilities::LSA.union(Capabilities::GIN);
/// assert_eq!(USED, LsaGin::CAPABILITIES);
/// assert!(USED.includes(Capabilities::LSA));
/// assert_eq!(USED.to_string(), "lsa+gin");
/// assert_eq!(Capabilities::NONE.to_string(), "none");
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Capabilities {
    /// LSA: load/store access to the LSA team's memory.
    pub lsa: bool,
    /// GIN: GPU-initiated networking.
    pub gin: bool,
    /// Multimem: NVLink SHARP multicast on the LSA team.
    pub multimem: bool,
}

impl Capabilities {
    /// The empty set.
    pub const NONE: Capabilities = Capabilities::new(false, false, false);
    /// LSA alone.
    pub const LSA: Capabilities = Capabilities::new(true, false, false);
    /// GIN alone.
    pub const GIN: Capabilities = Capabilities::new(false, true, false);
    /// Multimem alone.
    pub const MULTIMEM: Capabilities = Capabilities::new(false, false, true);

    /// The set with the given members.
    pub const fn new(lsa: bool, gin: bool, multimem: bool) -> Capabilities {
        Capabilities { lsa, gin, multimem }
    }

    /// The set of the type-level marker `C`.
    pub const fn of<C: CapabilitySet>() -> Capabilities {
        C::CAPABILITIES
    }

    /// Everything in `self` or in `other`.
    #[must_use]
    pub const fn union(self, other: Capabilities) -> Capabilities {
        Capabilities {
            lsa: self.lsa || other.lsa,
            gin: self.gin || other.gin,
            multimem: self.multimem || other.multimem,
        }
    }

    /// Whether every member of `other` is in `self` (a communicator offering `self` can run a kernel using
    /// `other`).
    pub const fn includes(self, other: Capabilities) -> bool {
        (self.lsa || !other.lsa) && (self.gin || !other.gin) && (self.multimem || !other.multimem)
    }

    /// What `other` has that `self` lacks.
    #[must_use]
    pub const fn missing_from(self, other: Capabilities) -> Capabilities {
        Capabilities {
            lsa: other.lsa && !self.lsa,
            gin: other.gin && !self.gin,
            multimem: other.multimem && !self.multimem,
        }
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        !self.lsa && !self.gin && !self.multimem
    }

    /// The name of the smallest capability marker type including this set (`"LsaGin"` for {lsa, gin}; a set with
    /// GIN and multimem but no LSA has no marker of its own and names `"LsaGinMultimem"`; the empty set names
    /// `"Lsa"`, every device communicator's least capability).
    pub const fn marker_name(self) -> &'static str {
        match (self.lsa, self.gin, self.multimem) {
            (_, false, false) => Lsa::NAME,
            (false, true, false) => Gin::NAME,
            (false, false, true) => Multimem::NAME,
            (true, true, false) => LsaGin::NAME,
            (true, false, true) => LsaMultimem::NAME,
            (_, true, true) => LsaGinMultimem::NAME,
        }
    }
}

impl fmt::Display for Capabilities {
    /// `lsa+gin+multimem`, members in that order, or `none`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let mut first = true;
        for (present, name) in [(self.lsa, "lsa"), (self.gin, "gin"), (self.multimem, "multimem")] {
            if present {
                if !first {
                    f.write_str("+")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_agree_with_their_values() {
        assert_eq!(Lsa::CAPABILITIES, Capabilities::LSA);
        assert_eq!(Gin::CAPABILITIES, Capabilities::GIN);
        assert_eq!(Multimem::CAPABILITIES, Capabilities::MULTIMEM);
        assert_eq!(LsaGin::CAPABILITIES, Capabilities::new(true, true, false));
        assert_eq!(LsaMultimem::CAPABILITIES, Capabilities::new(true, false, true));
        assert_eq!(LsaGinMultimem::CAPABILITIES, Capabilities::new(true, true, true));
        assert_eq!(Capabilities::of::<LsaGin>().marker_name(), "LsaGin");
    }

    #[test]
    fn set_algebra() {
        let all = LsaGinMultimem::CAPABILITIES;
        assert!(all.includes(LsaGin::CAPABILITIES));
        assert!(!Lsa::CAPABILITIES.includes(LsaGin::CAPABILITIES));
        assert_eq!(Lsa::CAPABILITIES.missing_from(LsaGin::CAPABILITIES), Capabilities::GIN);
        assert!(Capabilities::NONE.is_empty());
        assert!(Capabilities::LSA.includes(Capabilities::NONE));
        assert_eq!(all.to_string(), "lsa+gin+multimem");
        assert_eq!(Capabilities::new(false, true, true).to_string(), "gin+multimem");
        assert_eq!(Capabilities::new(false, true, true).marker_name(), "LsaGinMultimem");
    }

    fn needs_gin<C: HasGin>() -> &'static str {
        C::NAME
    }

    #[test]
    fn has_traits_follow_membership() {
        assert_eq!(needs_gin::<LsaGin>(), "LsaGin");
        assert_eq!(needs_gin::<Gin>(), "Gin");
        assert_eq!(needs_gin::<LsaGinMultimem>(), "LsaGinMultimem");
    }
}
