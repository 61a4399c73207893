//! Cooperative groups: the set of threads that together perform a collective device-API call.
//!
//! NCCL's device API calls (barrier syncs, puts, reduce-copies) are made by a *coop*: every thread of it calls, and
//! the work is split among them. These are NCCL's `ncclCoop*` types. The unit structs are values in Rust and types
//! in C++; the macro writes `Cta` as `weft::Cta{}` (rule R6).

use crate::device_only;

mod sealed {
    pub trait Sealed {}
}

/// A cooperative group of threads (sealed: [`Thread`], [`Warp`], [`Cta`], [`Lanes`], [`WarpSpan`]).
pub trait Coop: sealed::Sealed + Copy + core::fmt::Debug {
    /// This thread's rank within the group, `0..size()`. C++ `.thread_rank()`.
    fn thread_rank(self) -> u32;
    /// Threads in the group. C++ `.size()`.
    fn size(self) -> u32;
    /// Waits for every thread of the group. C++ `.sync()`.
    fn sync(self);
}

/// The calling thread alone. C++ `weft::Thread{}` → `ncclCoopThread`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Thread;

/// The calling thread's whole warp (all 32 lanes must call). C++ `weft::Warp{}` → `ncclCoopWarp`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Warp;

/// The calling thread's whole block, one-dimensional (every thread must call). C++ `weft::Cta{}` →
/// `ncclCoopCta`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cta;

/// Some lanes of the calling warp, given by a bit mask (every lane in the mask must call). C++ `weft::Lanes` →
/// `ncclCoopLanes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    mask: u32,
}

impl Lanes {
    /// The lanes whose bits are set in `mask`. C++ `weft::Lanes::from_mask(mask)`.
    pub const fn from_mask(mask: u32) -> Lanes {
        Lanes { mask }
    }

    /// The lanes of this warp that are executing this call together (`__activemask()`).
    /// C++ `weft::Lanes::coalesced()` → `ncclCoopCoalesced()`.
    pub fn coalesced() -> Lanes {
        device_only("Lanes::coalesced")
    }

    /// The lane mask. C++ `.mask()`.
    pub const fn mask(self) -> u32 {
        self.mask
    }
}

/// Consecutive warps of the block, `first_warp .. first_warp + warp_count`, with an id in `0..15` unique among the
/// warp spans in a collective at the same time (it names the hardware named barrier `1 + id`).
/// C++ `weft::WarpSpan` → `ncclCoopWarpSpan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WarpSpan {
    first_warp: u32,
    warp_count: u32,
    id: u32,
}

impl WarpSpan {
    /// The span of `warp_count` warps from `first_warp`, with barrier id `id` (< 15).
    /// C++ `weft::WarpSpan::from_warps(first_warp, warp_count, id)`.
    pub const fn from_warps(first_warp: u32, warp_count: u32, id: u32) -> WarpSpan {
        WarpSpan { first_warp, warp_count, id }
    }

    /// The first warp. C++ `.first_warp()`.
    pub const fn first_warp(self) -> u32 {
        self.first_warp
    }

    /// The number of warps. C++ `.warp_count()`.
    pub const fn warp_count(self) -> u32 {
        self.warp_count
    }

    /// The barrier id. C++ `.id()`.
    pub const fn id(self) -> u32 {
        self.id
    }
}

macro_rules! coop {
    ($($t:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Coop for $t {
            fn thread_rank(self) -> u32 { device_only(concat!(stringify!($t), "::thread_rank")) }
            fn size(self) -> u32 { device_only(concat!(stringify!($t), "::size")) }
            fn sync(self) { device_only(concat!(stringify!($t), "::sync")) }
        }
    )*};
}
coop!(Thread, Warp, Cta, Lanes, WarpSpan);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coop_values_are_plain_data_on_the_host() {
        assert_eq!(Lanes::from_mask(0xff).mask(), 0xff);
        let span = WarpSpan::from_warps(2, 4, 1);
        assert_eq!((span.first_warp(), span.warp_count(), span.id()), (2, 4, 1));
    }
}
