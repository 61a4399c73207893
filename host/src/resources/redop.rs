//! Custom reduction operators: `ncclRedOpCreatePreMulSum`.

use std::marker::PhantomData;

use crate::comm::{Active, Communicator, Mode};
use crate::datatype::Element;
use crate::error::Error;
use crate::resources::{Native, ResourceId};
use crate::result;
use crate::sys::{self, ncclComm_t};

/// Where a [`PreMulSum`]'s scalar lives.
#[derive(Debug)]
pub enum Scalar<'a, T> {
    /// A host value, read when the op is created.
    Host(T),
    /// A device value (one element), read when each operation runs: change it between operations without
    /// recreating the op.
    Device(&'a cudarc::driver::CudaSlice<T>),
}

/// A reduction that multiplies every input by a scalar before summing (`ncclRedOpCreatePreMulSum`):
/// the building block of averaged gradients with a custom factor. Bound to its communicator.
pub struct PreMulSum<'comm, T: Element, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    id: ResourceId,
    raw: sys::ncclRedOp_t,
    element: PhantomData<T>,
}

/// A copyable handle to a custom op, for [`ReduceOp::Custom`](crate::ReduceOp::Custom).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomOp<'op> {
    raw: sys::ncclRedOp_t,
    datatype: sys::ncclDataType_t,
    comm: ncclComm_t,
    live: bool,
    op: PhantomData<&'op ()>,
}

impl CustomOp<'_> {
    pub(crate) fn raw(self) -> sys::ncclRedOp_t {
        self.raw
    }

    pub(crate) fn check_usable(self, comm: ncclComm_t, datatype: sys::ncclDataType_t, name: &str) -> Result<(), Error> {
        if !self.live {
            return Err(Error::invalid("op", "the custom op was released by close_all_resources"));
        }
        if self.comm != comm {
            return Err(Error::invalid("op", "the custom op belongs to another communicator; create it on this one"));
        }
        if self.datatype != datatype {
            return Err(Error::invalid(
                "op",
                format!("the custom op was created for another element type than {name}"),
            ));
        }
        Ok(())
    }
}

impl<M: Mode> Communicator<Active, M> {
    /// Creates a pre-multiplied sum for elements of `T` with the given scalar.
    pub fn pre_mul_sum<T: Element>(&self, scalar: Scalar<'_, T>) -> Result<PreMulSum<'_, T, M>, Error> {
        let (mut host_value, device_ptr);
        let (ptr, residence) = match scalar {
            Scalar::Host(value) => {
                host_value = value;
                (std::ptr::from_mut(&mut host_value).cast(), sys::ncclScalarResidence_t::ncclScalarHostImmediate)
            }
            Scalar::Device(slice) => {
                if slice.len() != 1 {
                    return Err(Error::invalid(
                        "scalar",
                        format!("a device scalar is one element, got {}", slice.len()),
                    ));
                }
                if slice.context().ordinal() != self.cuda_device() {
                    return Err(Error::invalid("scalar", "lives on another device than this rank"));
                }
                let stream = slice.stream().clone();
                let (address, _guard) = cudarc::driver::DevicePtr::device_ptr(slice, &stream);
                device_ptr = address;
                (device_ptr as *mut core::ffi::c_void, sys::ncclScalarResidence_t::ncclScalarDevice)
            }
        };
        // SAFETY: our live, active communicator; `ptr` points at one T in host memory for the duration of the
        // call (immediate) or at device memory of this rank that outlives the op (borrowed for its lifetime
        // only during creation; NCCL reads it at each operation, documented on `Scalar::Device`).
        let raw =
            unsafe { result::red_op_create_pre_mul_sum(self.library(), self.raw(), ptr, T::DATATYPE, residence) }?;
        let id = self.register_resource(Native::RedOp(raw));
        Ok(PreMulSum { comm: self, id, raw, element: PhantomData })
    }
}

impl<T: Element, M: Mode> PreMulSum<'_, T, M> {
    /// The op, for [`ReduceOp::Custom`](crate::ReduceOp::Custom).
    pub fn op(&self) -> CustomOp<'_> {
        CustomOp {
            raw: self.raw,
            datatype: T::DATATYPE,
            comm: self.comm.raw(),
            live: self.comm.check_live(self.id, "op").is_ok(),
            op: PhantomData,
        }
    }
}

impl<T: Element, M: Mode> Drop for PreMulSum<'_, T, M> {
    fn drop(&mut self) {
        if let Err(error) = self.comm.release_resource(self.id) {
            tracing::error!(%error, "ncclRedOpDestroy failed");
        }
    }
}

impl<T: Element, M: Mode> std::fmt::Debug for PreMulSum<'_, T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreMulSum").field("element", &T::NAME).field("op", &self.raw.0).finish()
    }
}
