//! Element types and the numeric traits kernel generics are bounded by, and the math functions.
//!
//! In C++ these traits do not exist: `weft.cuh` overloads each function for every type that implements the trait
//! here. Trait *methods* on scalars (`x.sqrt()`, `x.to_f32()`) and associated functions (`T::zero()`) have no C++
//! spelling on `float`, so the macro rewrites them to free functions (`weft::sqrt(x)`, `weft::zero<T>()`; rules
//! R9 and R10 of `docs/vocabulary.md`). The free functions of this module (`sqrt(x)`) are a plain name copy.

use core::fmt::Debug;
use core::ops::{Add, AddAssign, Div, DivAssign, Mul, MulAssign, Neg, Sub, SubAssign};

use half::{bf16, f16};

mod sealed {
    pub trait Sealed {}
}

/// A type a kernel can take slices, windows and scalars of: it has a C++ spelling and an entry-point suffix.
///
/// Implemented for `f32`, `f64`, [`f16`](struct@half::f16), [`bf16`](struct@half::bf16), `i8`, `u8`, `i32`, `u32`, `i64`, `u64`, `usize`, `isize` and
/// `bool` (sealed: exactly the types of the kernel ABI's type table).
pub trait Element: sealed::Sealed + Copy + Default + Debug + PartialEq + Send + Sync + 'static {
    /// The Rust name, used as the entry-point suffix of generic kernels (`k__f32`).
    const NAME: &'static str;
    /// The C++ spelling the macro emits (`float`, `__nv_bfloat16`, `uint32_t`).
    const CPP_NAME: &'static str;
}

/// Element types with arithmetic: every [`Element`] but `bool`.
pub trait Numeric:
    Element
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + AddAssign
    + SubAssign
    + MulAssign
    + DivAssign
{
    /// Zero. In C++: `weft::zero<T>()` (rule R9).
    fn zero() -> Self;
    /// One. In C++: `weft::one<T>()` (rule R9).
    fn one() -> Self;
}

/// Floating-point element types: `f32`, `f64`, [`f16`](struct@half::f16), [`bf16`](struct@half::bf16).
///
/// The methods exist so generic code reads like `std` (`x.sqrt()`); the macro lowers each to the free function of
/// the same name with the receiver first (rule R10: `x.mul_add(a, b)` → `weft::mul_add(x, a, b)`). On `f16` and
/// `bf16` they compute in `f32` and round once.
pub trait Float: Numeric + Neg<Output = Self> {
    /// Converts from `f32`, rounding to nearest. In C++: `weft::from_f32<T>(v)` (rule R9).
    fn from_f32(value: f32) -> Self;
    /// Converts to `f32` (exact for `f16`/`bf16`, rounding for `f64`). In C++: `weft::to_f32(x)`.
    fn to_f32(self) -> f32;
    /// Square root (`sqrtf`, `sqrt`).
    fn sqrt(self) -> Self;
    /// Reciprocal square root (`rsqrtf`, `rsqrt`).
    fn rsqrt(self) -> Self;
    /// e to the power of `self` (`expf`, `exp`).
    fn exp(self) -> Self;
    /// Natural logarithm (`logf`, `log`); the free function is [`log`].
    fn ln(self) -> Self;
    /// Hyperbolic tangent (`tanhf`, `tanh`).
    fn tanh(self) -> Self;
    /// `self * a + b` with one rounding (`fmaf`, `fma`); the free function is [`fma`].
    fn mul_add(self, a: Self, b: Self) -> Self;
    /// The smaller of `self` and `other` (`fminf`: a NaN loses).
    fn min(self, other: Self) -> Self;
    /// The larger of `self` and `other` (`fmaxf`: a NaN loses).
    fn max(self, other: Self) -> Self;
    /// Absolute value (`fabsf`, `fabs`).
    fn abs(self) -> Self;
}

/// Types a warp shuffle moves in one or two 32-bit shuffles: `f16`, `bf16`, `f32`, `f64`, `i32`, `u32`, `i64`,
/// `u64`.
pub trait Shuffle: Element {}

/// Types [`atomic_add`](crate::atomic_add) supports: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`, `f16`, `bf16`.
pub trait AtomicAdd: Numeric {}

/// Types [`atomic_min`](crate::atomic_min) and [`atomic_max`](crate::atomic_max) support: `i32`, `u32`, `i64`,
/// `u64`.
pub trait AtomicMinMax: Numeric {}

/// Types exchanged, compared-and-swapped, loaded and stored atomically: `i32`, `u32`, `i64`, `u64`, `f32`, `f64`.
pub trait AtomicBits: Element {}

/// Types the multimem (NVLink SHARP) load-reduce and reduce instructions support: `f32`, `f16`, `bf16`, `f64`,
/// `i32`, `u32`, `u64`.
pub trait MultimemElement: Numeric {}

/// Multimem element types a single element can be stored through: the 32- and 64-bit ones (`f32`, `f64`, `i32`,
/// `u32`, `u64`); the hardware has no 16-bit multimem store.
pub trait MultimemStore: MultimemElement {}

macro_rules! element {
    ($($t:ty => $name:literal, $cpp:literal;)*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const NAME: &'static str = $name;
            const CPP_NAME: &'static str = $cpp;
        }
    )*};
}

element! {
    f32 => "f32", "float";
    f64 => "f64", "double";
    f16 => "f16", "__half";
    bf16 => "bf16", "__nv_bfloat16";
    i8 => "i8", "int8_t";
    u8 => "u8", "uint8_t";
    i32 => "i32", "int32_t";
    u32 => "u32", "uint32_t";
    i64 => "i64", "int64_t";
    u64 => "u64", "uint64_t";
    usize => "usize", "size_t";
    isize => "isize", "ptrdiff_t";
    bool => "bool", "bool";
    float8::F8E4M3 => "f8e4m3", "__nv_fp8_e4m3";
    float8::F8E5M2 => "f8e5m2", "__nv_fp8_e5m2";
}

// The numeric vocabulary works on the host too (host references, generic helpers shared with kernels): the same
// functions, computed by `std` (f16/bf16 in f32, rounded once, as on the device). Only approximations differ:
// `rsqrt` is exact here and the hardware's approximation on the GPU.
macro_rules! numeric_int {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            fn zero() -> Self { 0 }
            fn one() -> Self { 1 }
        }
    )*};
}
numeric_int!(i8, u8, i32, u32, i64, u64, usize, isize);

macro_rules! native_float {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            fn zero() -> Self { 0.0 }
            fn one() -> Self { 1.0 }
        }
        impl Float for $t {
            fn from_f32(value: f32) -> Self { value as $t }
            fn to_f32(self) -> f32 { self as f32 }
            fn sqrt(self) -> Self { <$t>::sqrt(self) }
            fn rsqrt(self) -> Self { 1.0 / <$t>::sqrt(self) }
            fn exp(self) -> Self { <$t>::exp(self) }
            fn ln(self) -> Self { <$t>::ln(self) }
            fn tanh(self) -> Self { <$t>::tanh(self) }
            fn mul_add(self, a: Self, b: Self) -> Self { <$t>::mul_add(self, a, b) }
            fn min(self, other: Self) -> Self { <$t>::min(self, other) }
            fn max(self, other: Self) -> Self { <$t>::max(self, other) }
            fn abs(self) -> Self { <$t>::abs(self) }
        }
    )*};
}
native_float!(f32, f64);

macro_rules! half_float {
    ($($t:ty),*) => {$(
        impl Numeric for $t {
            fn zero() -> Self { <$t>::ZERO }
            fn one() -> Self { <$t>::ONE }
        }
        impl Float for $t {
            fn from_f32(value: f32) -> Self { <$t>::from_f32(value) }
            fn to_f32(self) -> f32 { <$t>::to_f32(self) }
            fn sqrt(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, f32::sqrt) }
            fn rsqrt(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, |x| 1.0 / x.sqrt()) }
            fn exp(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, f32::exp) }
            fn ln(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, f32::ln) }
            fn tanh(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, f32::tanh) }
            fn mul_add(self, a: Self, b: Self) -> Self {
                <$t>::from_f32(<$t>::to_f32(self).mul_add(<$t>::to_f32(a), <$t>::to_f32(b)))
            }
            fn min(self, other: Self) -> Self { <$t>::from_f32(<$t>::to_f32(self).min(<$t>::to_f32(other))) }
            fn max(self, other: Self) -> Self { <$t>::from_f32(<$t>::to_f32(self).max(<$t>::to_f32(other))) }
            fn abs(self) -> Self { via_f32(self, <$t>::to_f32, <$t>::from_f32, f32::abs) }
        }
    )*};
}
half_float!(f16, bf16);

/// f16/bf16 arithmetic on the host: `op` in f32, rounded once.
fn via_f32<T>(x: T, widen: fn(T) -> f32, narrow: fn(f32) -> T, op: impl Fn(f32) -> f32) -> T {
    narrow(op(widen(x)))
}

macro_rules! marker {
    ($tr:ident: $($t:ty),*) => {$( impl $tr for $t {} )*};
}
marker!(Shuffle: f16, bf16, f32, f64, i32, u32, i64, u64);
marker!(AtomicAdd: i32, u32, i64, u64, f32, f64, f16, bf16);
marker!(AtomicMinMax: i32, u32, i64, u64);
marker!(AtomicBits: i32, u32, i64, u64, f32, f64);
marker!(MultimemElement: f32, f16, bf16, f64, i32, u32, u64);
marker!(MultimemStore: f32, f64, i32, u32, u64);

/// Square root. C++ `weft::sqrt`.
pub fn sqrt<F: Float>(x: F) -> F {
    x.sqrt()
}

/// Reciprocal square root, `1 / sqrt(x)` (the fast hardware approximation). C++ `weft::rsqrt`.
pub fn rsqrt<F: Float>(x: F) -> F {
    x.rsqrt()
}

/// e to the power of `x`. C++ `weft::exp`.
pub fn exp<F: Float>(x: F) -> F {
    x.exp()
}

/// Natural logarithm of `x` (C's `log`; the method is [`Float::ln`]). C++ `weft::log`.
pub fn log<F: Float>(x: F) -> F {
    x.ln()
}

/// Hyperbolic tangent. C++ `weft::tanh`.
pub fn tanh<F: Float>(x: F) -> F {
    x.tanh()
}

/// `a * b + c` rounded once. C++ `weft::fma`.
pub fn fma<F: Float>(a: F, b: F, c: F) -> F {
    a.mul_add(b, c)
}

/// Absolute value. C++ `weft::abs`.
pub fn abs<F: Float>(x: F) -> F {
    x.abs()
}

/// The smaller of `a` and `b` (for floats, a NaN loses). C++ `weft::min`.
pub fn min<T: Numeric>(a: T, b: T) -> T {
    match a.partial_cmp(&b) {
        Some(std::cmp::Ordering::Greater) => b,
        Some(_) => a,
        // A NaN loses (C's fmin): `a` if `b` is the NaN, else `b`.
        None if b.partial_cmp(&b).is_none() => a,
        None => b,
    }
}

/// The larger of `a` and `b` (for floats, a NaN loses). C++ `weft::max`.
pub fn max<T: Numeric>(a: T, b: T) -> T {
    match a.partial_cmp(&b) {
        Some(std::cmp::Ordering::Less) => b,
        Some(_) => a,
        None if b.partial_cmp(&b).is_none() => a,
        None => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names<T: Element>() -> (&'static str, &'static str) {
        (T::NAME, T::CPP_NAME)
    }

    #[test]
    fn element_names_follow_the_abi_table() {
        assert_eq!(names::<f32>(), ("f32", "float"));
        assert_eq!(names::<bf16>(), ("bf16", "__nv_bfloat16"));
        assert_eq!(names::<f16>(), ("f16", "__half"));
        assert_eq!(names::<usize>(), ("usize", "size_t"));
        assert_eq!(names::<isize>(), ("isize", "ptrdiff_t"));
        assert_eq!(names::<u8>(), ("u8", "uint8_t"));
        assert_eq!(names::<float8::F8E4M3>(), ("f8e4m3", "__nv_fp8_e4m3"));
    }

    #[test]
    fn the_numeric_vocabulary_works_on_the_host_too() {
        fn generic<F: Float>(x: F) -> f32 {
            (x.sqrt() + F::one() - F::zero()).mul_add(F::from_f32(2.0), exp(F::zero())).to_f32()
        }
        assert_eq!(generic(4.0f32), 7.0);
        assert_eq!(generic(4.0f64), 7.0);
        assert_eq!(generic(f16::from_f32(4.0)), 7.0);
        assert_eq!(generic(bf16::from_f32(4.0)), 7.0);
        assert_eq!(
            (rsqrt(4.0f32), log(1.0f64), tanh(0.0f32), abs(-2.0f64), fma(2.0f32, 3.0, 1.0)),
            (0.5, 0.0, 0.0, 2.0, 7.0)
        );
        assert_eq!((min(3, 5), max(3u64, 5), min(2.0f32, f32::NAN), max(f32::NAN, 2.0f32)), (3, 5, 2.0, 2.0));
        assert_eq!((i32::zero(), u8::one()), (0, 1));
        assert_eq!(bf16::from_f32(9.0).rsqrt().to_f32(), bf16::from_f32(1.0 / 3.0).to_f32());
    }
}
