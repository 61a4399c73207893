//! 16-byte vector loads and stores, and arithmetic on their lanes in `f32`.
//!
//! A memory-bound kernel reaches the GPU's bandwidth only with enough bytes in flight per thread; one 16-byte load
//! carries four `f32` or eight `bf16` elements for the price of one instruction. A [`Pack<T>`] is those 16 bytes
//! ([`pack_lanes::<T>()`](pack_lanes) lanes); [`Pack::widen`] turns them into a [`WidePack<T>`], the same lanes in
//! `f32`, where arithmetic happens (so `bf16` sums accumulate in `f32`, as the scalar `to_f32` style does), and
//! [`WidePack::narrow`] rounds them back, once.
//!
//! Packs are indexed by pack number: `x.load_pack(p)` reads elements `p·L .. p·L + L` (`L = pack_lanes::<T>()`),
//! which must lie inside the slice or view (unchecked on the GPU, like indexing). On a 16-byte aligned address it
//! is one vector instruction; on any other (a slice that starts mid-pack) it falls back to `L` scalar accesses, so
//! an odd offset is slower, never wrong.
//!
//! ```
//! use weft_device::prelude::*;
//!
//! // out = x + y, 16 bytes per thread per trip, then the elements that do not fill a pack.
//! fn add<T: Float>(x: &[T], y: &[T], out: &mut [T], n: usize) {
//!     let lanes = pack_lanes::<T>();
//!     for p in grid_stride(n / lanes) {
//!         let sum = x.load_pack(p).widen() + y.load_pack(p).widen();
//!         out.store_pack(p, sum.narrow());
//!     }
//!     for i in grid_stride(n % lanes) {
//!         let j = n / lanes * lanes + i;
//!         out[j] = x[j] + y[j];
//!     }
//! }
//! ```

use core::marker::PhantomData;
use core::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Sub, SubAssign};

use crate::device_only;
use crate::numeric::{Element, Float};
use crate::window::WindowView;

/// Elements of `T` in 16 bytes: 4 for `f32`, 8 for `bf16`/`f16`, 2 for `f64`. C++ `weft::pack_lanes<T>()`.
///
/// The one vocabulary function that also answers on the host (a constant of the type).
pub fn pack_lanes<T: Element>() -> usize {
    16 / core::mem::size_of::<T>()
}

/// 16 bytes of `T`: [`pack_lanes::<T>()`](pack_lanes) elements, loaded and stored by one instruction. C++
/// `weft::Pack<T>` (`alignas(16) T lanes[16 / sizeof(T)]`).
#[derive(Debug, Clone, Copy)]
pub struct Pack<T> {
    _device_only: PhantomData<T>,
}

/// The lanes of a [`Pack<T>`] widened to `f32`: where a kernel computes on packs. Arithmetic is lane by lane,
/// with another `WidePack<T>` or with an `f32` on either side (applied to every lane). C++ `weft::WidePack<T>`
/// (`float lanes[16 / sizeof(T)]`).
#[derive(Debug, Clone, Copy)]
pub struct WidePack<T> {
    _device_only: PhantomData<T>,
}

impl<T: Element> Pack<T> {
    /// Every lane `value`. C++ `weft::Pack<T>::splat(value)`.
    pub fn splat(value: T) -> Pack<T> {
        device_only("Pack::splat")
    }

    /// Lane `lane` (`0..pack_lanes::<T>()`). C++ `p.lane(k)`.
    pub fn lane(self, lane: usize) -> T {
        device_only("Pack::lane")
    }
}

impl<T: Float> Pack<T> {
    /// Whether no lane holds the Lamport sentinel (negative zero): the pack was written (see [`Lamport`]). C++
    /// `p.lamport_ready()`.
    pub fn lamport_ready(self) -> bool {
        device_only("Pack::lamport_ready")
    }

    /// The lanes in `f32` (exact for `f32`, `f16`, `bf16`; rounding for `f64`, like [`Float::to_f32`]). C++
    /// `p.widen()`.
    pub fn widen(self) -> WidePack<T> {
        device_only("Pack::widen")
    }
}

impl<T: Float> WidePack<T> {
    /// Every lane `value`. C++ `weft::WidePack<T>::splat(value)`.
    pub fn splat(value: f32) -> WidePack<T> {
        device_only("WidePack::splat")
    }

    /// Rounds every lane back to `T` (to nearest, once). C++ `w.narrow()`.
    pub fn narrow(self) -> Pack<T> {
        device_only("WidePack::narrow")
    }

    /// Lane `lane` (`0..pack_lanes::<T>()`). C++ `w.lane(k)`.
    pub fn lane(self, lane: usize) -> f32 {
        device_only("WidePack::lane")
    }

    /// The sum of the lanes (for a reduction: `(h * h).lane_sum()` is a pack's sum of squares). C++
    /// `w.lane_sum()`.
    pub fn lane_sum(self) -> f32 {
        device_only("WidePack::lane_sum")
    }

    /// Lane-wise square root. C++ `weft::sqrt(w)` (rule R10).
    pub fn sqrt(self) -> WidePack<T> {
        device_only("WidePack::sqrt")
    }

    /// Lane-wise reciprocal square root. C++ `weft::rsqrt(w)` (rule R10).
    pub fn rsqrt(self) -> WidePack<T> {
        device_only("WidePack::rsqrt")
    }

    /// Lane-wise `self * a + b` with one rounding. C++ `weft::mul_add(w, a, b)` (rule R10).
    pub fn mul_add(self, a: WidePack<T>, b: WidePack<T>) -> WidePack<T> {
        device_only("WidePack::mul_add")
    }
}

/// Pack loads from a slice (`&[T]`, `&mut [T]`) or a window view. C++ `x.load_pack(p)`.
pub trait LoadPack<T: Element> {
    /// Elements `pack·L .. pack·L + L` as one [`Pack`] (`L = pack_lanes::<T>()`).
    fn load_pack(&self, pack: usize) -> Pack<T>;
}

/// Pack stores into a mutable slice or a window view. C++ `x.store_pack(p, value)`.
pub trait StorePack<T: Element> {
    /// Writes `value` to elements `pack·L .. pack·L + L` (`L = pack_lanes::<T>()`).
    fn store_pack(&mut self, pack: usize, value: Pack<T>);
}

/// Lamport packs on a window view: data that carries its own "written" flag, for all-reduces without a barrier.
///
/// A buffer starts with every lane at the sentinel, negative zero. A writer stores a pack with
/// [`lamport_store_pack`](Lamport::lamport_store_pack), which turns negative zeros into positive ones (the same value
/// in any sum) so that a written pack is never taken for an unwritten one; a reader polls with
/// [`lamport_wait_pack`](Lamport::lamport_wait_pack) until no lane is the sentinel, or a deadline passes (then the
/// returned pack is not [`lamport_ready`](Pack::lamport_ready): the kernel reports it instead of hanging); once every
/// reader is done with a buffer, its owner [`lamport_clear_pack`](Lamport::lamport_clear_pack)s it for a later round.
/// Stores and loads are volatile (relaxed, system scope), 16 bytes at once on an aligned address, element by element
/// otherwise; every lane is checked, so a pack seen half written is seen as not ready.
///
/// C++ `view.lamport_store_pack(p, v)`, `view.lamport_wait_pack(p, deadline_ns)`, `view.lamport_clear_pack(p)`.
pub trait Lamport<T: Float> {
    /// Stores `value` (negative zeros made positive) into elements `pack·L .. pack·L + L`.
    fn lamport_store_pack(&mut self, pack: usize, value: Pack<T>);
    /// Loads elements `pack·L .. pack·L + L` until no lane is the sentinel or [`global_timer_ns`](crate::global_timer_ns)
    /// reaches `deadline_ns`; returns the last load (check [`Pack::lamport_ready`]).
    fn lamport_wait_pack(&self, pack: usize, deadline_ns: u64) -> Pack<T>;
    /// Sets every lane of elements `pack·L .. pack·L + L` to the sentinel.
    fn lamport_clear_pack(&mut self, pack: usize);
}

impl<T: Float> Lamport<T> for WindowView<'_, T> {
    fn lamport_store_pack(&mut self, pack: usize, value: Pack<T>) {
        device_only("lamport_store_pack")
    }
    fn lamport_wait_pack(&self, pack: usize, deadline_ns: u64) -> Pack<T> {
        device_only("lamport_wait_pack")
    }
    fn lamport_clear_pack(&mut self, pack: usize) {
        device_only("lamport_clear_pack")
    }
}

/// Loads of `f32` lanes matching another type's pack, from an `f32` slice: for mixed precision, where `f32` master
/// weights or optimizer moments sit next to `bf16` parameters. C++ `x.template load_wide<T>(p)` (rule R14).
pub trait LoadWide {
    /// Elements `pack·L .. pack·L + L` (`L = pack_lanes::<T>()`: 4 for `f32`, 8 for `bf16`) as a [`WidePack<T>`]:
    /// one 16-byte load per four lanes.
    fn load_wide<T: Float>(&self, pack: usize) -> WidePack<T>;
}

/// Stores of a [`WidePack<T>`]'s `f32` lanes into an `f32` slice (see [`LoadWide`]). C++ `x.store_wide(p, w)`.
pub trait StoreWide {
    /// Writes the lanes of `value` to elements `pack·L .. pack·L + L` (`L = pack_lanes::<T>()`).
    fn store_wide<T: Float>(&mut self, pack: usize, value: WidePack<T>);
}

impl LoadWide for [f32] {
    fn load_wide<T: Float>(&self, pack: usize) -> WidePack<T> {
        device_only("load_wide")
    }
}

impl StoreWide for [f32] {
    fn store_wide<T: Float>(&mut self, pack: usize, value: WidePack<T>) {
        device_only("store_wide")
    }
}

impl<T: Element> LoadPack<T> for [T] {
    fn load_pack(&self, pack: usize) -> Pack<T> {
        device_only("load_pack")
    }
}

impl<T: Element> StorePack<T> for [T] {
    fn store_pack(&mut self, pack: usize, value: Pack<T>) {
        device_only("store_pack")
    }
}

impl<T: Element> LoadPack<T> for WindowView<'_, T> {
    fn load_pack(&self, pack: usize) -> Pack<T> {
        device_only("load_pack")
    }
}

impl<T: Element> StorePack<T> for WindowView<'_, T> {
    fn store_pack(&mut self, pack: usize, value: Pack<T>) {
        device_only("store_pack")
    }
}

macro_rules! wide_ops {
    ($($op:ident $method:ident $assign:ident $assign_method:ident;)*) => {$(
        impl<T: Float> $op for WidePack<T> {
            type Output = WidePack<T>;
            fn $method(self, rhs: WidePack<T>) -> WidePack<T> {
                device_only(stringify!(WidePack::$method))
            }
        }
        impl<T: Float> $op<f32> for WidePack<T> {
            type Output = WidePack<T>;
            fn $method(self, rhs: f32) -> WidePack<T> {
                device_only(stringify!(WidePack::$method))
            }
        }
        impl<T: Float> $assign for WidePack<T> {
            fn $assign_method(&mut self, rhs: WidePack<T>) {
                device_only(stringify!(WidePack::$assign_method))
            }
        }
        impl<T: Float> $assign<f32> for WidePack<T> {
            fn $assign_method(&mut self, rhs: f32) {
                device_only(stringify!(WidePack::$assign_method))
            }
        }
    )*};
}

wide_ops! {
    Add add AddAssign add_assign;
    Sub sub SubAssign sub_assign;
    Mul mul MulAssign mul_assign;
    Div div DivAssign div_assign;
}

// `2.0 * w`, `1.0 - w`: the scalar on the left, applied to every lane.
macro_rules! scalar_left_ops {
    ($($op:ident $method:ident;)*) => {$(
        impl<T: Float> $op<WidePack<T>> for f32 {
            type Output = WidePack<T>;
            fn $method(self, rhs: WidePack<T>) -> WidePack<T> {
                device_only(stringify!(f32::$method))
            }
        }
    )*};
}

scalar_left_ops! {
    Add add;
    Sub sub;
    Mul mul;
    Div div;
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    #[test]
    fn lanes_fill_sixteen_bytes() {
        assert_eq!(pack_lanes::<f32>(), 4);
        assert_eq!(pack_lanes::<bf16>(), 8);
        assert_eq!(pack_lanes::<f64>(), 2);
        assert_eq!(pack_lanes::<u8>(), 16);
    }
}
