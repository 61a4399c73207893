//! Element types NCCL can move and reduce.

use crate::sys::ncclDataType_t;

mod sealed {
    pub trait Sealed {}
}

/// An element type of NCCL collectives (sealed: exactly NCCL's `ncclDataType_t` set).
pub trait Element: cudarc::driver::DeviceRepr + Copy + Send + Sync + 'static + sealed::Sealed {
    /// The NCCL datatype.
    const DATATYPE: ncclDataType_t;
    /// The Rust name, for messages.
    const NAME: &'static str;
}

macro_rules! element {
    ($($ty:ty => $dt:ident),* $(,)?) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DATATYPE: ncclDataType_t = ncclDataType_t::$dt;
            const NAME: &'static str = stringify!($ty);
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
