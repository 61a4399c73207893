//! Element types NCCL can move and reduce.

use crate::sys::ncclDataType_t;

mod sealed {
    pub trait Sealed {}
}

/// An element type of NCCL collectives (sealed: exactly NCCL's `ncclDataType_t` set).
///
/// Every one is also a kernel [`weft_device::Element`] (its supertrait), whose `NAME` (`f32`, `bf16`, …) messages
/// use: a generic host helper needs only this one bound, and `T::NAME` is never ambiguous.
///
/// ```
/// use weft_host::Element;
/// fn describe<T: Element>() -> String {
///     format!("{} is NCCL datatype {}", T::NAME, T::DATATYPE.0)
/// }
/// // Next to the kernel vocabulary's traits too: one `NAME`, reached through both bounds.
/// fn widen<T: Element + weft_device::Float>() -> &'static str {
///     T::NAME
/// }
/// assert_eq!(describe::<f32>(), "f32 is NCCL datatype 7");
/// assert_eq!(widen::<half::bf16>(), "bf16");
/// ```
pub trait Element: weft_device::Element + cudarc::driver::DeviceRepr + sealed::Sealed {
    /// The NCCL datatype.
    const DATATYPE: ncclDataType_t;
}

macro_rules! element {
    ($($ty:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DATATYPE: ncclDataType_t = ncclDataType_t::$dt;
        }
    )*};
}

element! {
    i8 => ncclInt8,
    u8 => ncclUint8,
    i32 => ncclInt32,
    u32 => ncclUint32,
    i64 => ncclInt64,
    u64 => ncclUint64,
    half::f16 => ncclFloat16,
    f32 => ncclFloat32,
    f64 => ncclFloat64,
    half::bf16 => ncclBfloat16,
    float8::F8E4M3 => ncclFloat8e4m3,
    float8::F8E5M2 => ncclFloat8e5m2,
}

/// A reduction for `all_reduce`, `reduce` and `reduce_scatter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReduceOp<'op> {
    /// Sum.
    Sum,
    /// Product.
    Prod,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Average (sum divided by the number of ranks).
    Avg,
    /// A custom op created on this communicator (see [`crate::PreMulSum::op`]).
    Custom(crate::resources::CustomOp<'op>),
}

impl ReduceOp<'_> {
    pub(crate) fn raw(self) -> crate::sys::ncclRedOp_t {
        use crate::sys::ncclRedOp_t;
        match self {
            ReduceOp::Sum => ncclRedOp_t::ncclSum,
            ReduceOp::Prod => ncclRedOp_t::ncclProd,
            ReduceOp::Max => ncclRedOp_t::ncclMax,
            ReduceOp::Min => ncclRedOp_t::ncclMin,
            ReduceOp::Avg => ncclRedOp_t::ncclAvg,
            ReduceOp::Custom(op) => op.raw(),
        }
    }
}
