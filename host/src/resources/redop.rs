//! Custom reduction operators: `ncclRedOpCreatePreMulSum`.
//!
//! With a device scalar (`ncclScalarDevice`) NCCL keeps the scalar's address in the op and reads it in every
//! operation that uses the op, until `ncclRedOpDestroy` — and the kernels it enqueued read it after that too. So the
//! op borrows the scalar for its whole life (the scalar can be neither freed nor written while the op lives), and
//! dropping the op orders the scalar's own stream after every operation that used it: cudarc frees a `CudaSlice`
//! on its stream, so the free, and any later write ordered by cudarc's events, come after NCCL's last read.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};

use crate::comm::{Active, Communicator, Mode};
use crate::datatype::Element;
use crate::error::Error;
use crate::resources::{Liveness, Native, ResourceId};
use crate::result;
use crate::sys::{self, ncclComm_t};

/// Where a [`PreMulSum`]'s scalar lives.
#[derive(Debug)]
pub enum Scalar<'a, T> {
    /// A host value, read when the op is created.
    Host(T),
    /// A device value (one element), read by each operation when it runs. The op borrows it for its whole life:
    /// to change the factor, drop the op, write the scalar and create a new one (creation is a host call).
    Device(&'a CudaSlice<T>),
}

/// A reduction that multiplies every input by a scalar before summing (`ncclRedOpCreatePreMulSum`):
/// the building block of averaged gradients with a custom factor. Bound to its communicator and, for a device
/// scalar, to the scalar (`'a` is the shorter of the two borrows).
pub struct PreMulSum<'a, T: Element, M: Mode = crate::Blocking> {
    comm: &'a Communicator<Active, M>,
    /// The registry key, and the flag `close_all_resources` sets when it destroys the op (read by every operation
    /// with the op, through its `CustomOp`s too).
    id: (ResourceId, Liveness),
    raw: sys::ncclRedOp_t,
    /// The device scalar and the streams of the operations that read it, if the scalar is on the device.
    device: Option<(&'a CudaSlice<T>, ScalarUses)>,
    element: PhantomData<T>,
}

/// The streams operations using a device-scalar op were enqueued on: an event per stream, recorded after each
/// enqueue, and the replay streams of CUDA graphs that recorded the op.
#[derive(Debug, Default)]
pub(crate) struct ScalarUses {
    events: Mutex<Vec<(usize, CudaEvent)>>,
    replays: Mutex<Vec<Arc<CudaStream>>>,
}

impl ScalarUses {
    fn key(stream: &CudaStream) -> usize {
        stream.cu_stream() as usize
    }

    /// Makes sure `stream` has an event to record into after the enqueue (fallible, so before NCCL is called).
    fn prepare(&self, stream: &CudaStream) -> Result<(), Error> {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if !events.iter().any(|(key, _)| *key == Self::key(stream)) {
            events.push((Self::key(stream), stream.context().new_event(None)?));
        }
        Ok(())
    }

    /// Records that an operation using the op was enqueued on `stream` (after [`prepare`](Self::prepare)).
    fn note(&self, stream: &CudaStream) {
        let events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, event)) = events.iter().find(|(key, _)| *key == Self::key(stream)) {
            if let Err(error) = event.record(stream) {
                tracing::error!(%error, "recording a device-scalar op's use failed");
            }
        }
    }

    /// Orders `after` (the scalar's stream) behind every use noted: GPU-side waits, no host wait.
    fn order_before(&self, after: &CudaStream) -> Result<(), Error> {
        for (_, event) in self.events.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            after.wait(event)?;
        }
        for replay in self.replays.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            after.wait(&replay.record_event(None)?)?;
        }
        Ok(())
    }
}

/// A copyable handle to a custom op, for [`ReduceOp::Custom`](crate::ReduceOp::Custom).
#[derive(Debug, Clone, Copy)]
pub struct CustomOp<'op> {
    raw: sys::ncclRedOp_t,
    datatype: sys::ncclDataType_t,
    comm: ncclComm_t,
    /// Read at each use, not when the handle was taken: `close_all_resources` may destroy the op while copies of
    /// the handle live.
    live: &'op Liveness,
    /// The uses of a device scalar, which every operation with the op notes.
    uses: Option<&'op ScalarUses>,
}

impl PartialEq for CustomOp<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.raw, self.datatype, self.comm) == (other.raw, other.datatype, other.comm)
            && std::ptr::eq(self.live, other.live)
            && self.uses.map(std::ptr::from_ref) == other.uses.map(std::ptr::from_ref)
    }
}

impl Eq for CustomOp<'_> {}

impl CustomOp<'_> {
    pub(crate) fn raw(self) -> sys::ncclRedOp_t {
        self.raw
    }

    /// Whether the op can be used on `comm` for `datatype` (`name` for messages), for an operation about to be
    /// enqueued on `stream`.
    pub(crate) fn check_usable(
        self,
        comm: ncclComm_t,
        datatype: sys::ncclDataType_t,
        name: &str,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.check_matches(comm, datatype, name)?;
        if let Some(uses) = self.uses {
            uses.prepare(stream)?;
        }
        Ok(())
    }

    /// Whether the op is still created (read now: `close_all_resources` may have destroyed it since this handle was
    /// taken) and is of `comm` and `datatype`.
    fn check_matches(self, comm: ncclComm_t, datatype: sys::ncclDataType_t, name: &str) -> Result<(), Error> {
        self.live.check("op")?;
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

    /// Records that an operation with this op was enqueued on `stream` (its scalar's drop order waits for it).
    pub(crate) fn note_enqueued(self, stream: &CudaStream) {
        if let Some(uses) = self.uses {
            uses.note(stream);
        }
    }

    /// Records that a CUDA graph replaying on `stream` uses this op.
    pub(crate) fn note_replays(self, stream: &Arc<CudaStream>) {
        if let Some(uses) = self.uses {
            let mut replays = uses.replays.lock().unwrap_or_else(PoisonError::into_inner);
            if !replays.iter().any(|known| Arc::ptr_eq(known, stream)) {
                replays.push(stream.clone());
            }
        }
    }
}

impl<M: Mode> Communicator<Active, M> {
    /// Creates a pre-multiplied sum for elements of `T` with the given scalar. A device scalar is borrowed for
    /// the op's life, and its pending writes are waited for here (every later operation reads this value).
    pub fn pre_mul_sum<'a, T: Element>(&'a self, scalar: Scalar<'a, T>) -> Result<PreMulSum<'a, T, M>, Error> {
        let mut host_value;
        let (ptr, residence, device) = match scalar {
            Scalar::Host(value) => {
                host_value = value;
                (std::ptr::from_mut(&mut host_value).cast(), sys::ncclScalarResidence_t::ncclScalarHostImmediate, None)
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
                let address = {
                    // The slice's stream waits for the slice's pending writes (cudarc's events), then the host waits
                    // for that stream: every operation reads the value as it is now.
                    let (address, _read) = slice.device_ptr(&stream);
                    address
                };
                crate::cuda::settle(&stream)?;
                (
                    address as *mut core::ffi::c_void,
                    sys::ncclScalarResidence_t::ncclScalarDevice,
                    Some((slice, ScalarUses::default())),
                )
            }
        };
        // SAFETY: our live, active communicator; `ptr` points at one T in host memory for the duration of the
        // call (immediate), or at one T of device memory of this rank that the op borrows for its life ('a), whose
        // drop orders the memory's stream after every operation that read it.
        let raw =
            unsafe { result::red_op_create_pre_mul_sum(self.library(), self.raw(), ptr, T::DATATYPE, residence) }?;
        let id = self.register_tracked(Native::RedOp(raw), None);
        Ok(PreMulSum { comm: self, id, raw, device, element: PhantomData })
    }
}

impl<T: Element, M: Mode> PreMulSum<'_, T, M> {
    /// The op, for [`ReduceOp::Custom`](crate::ReduceOp::Custom).
    pub fn op(&self) -> CustomOp<'_> {
        CustomOp {
            raw: self.raw,
            datatype: T::DATATYPE,
            comm: self.comm.raw(),
            live: &self.id.1,
            uses: self.device.as_ref().map(|(_, uses)| uses),
        }
    }
}

impl<T: Element, M: Mode> Drop for PreMulSum<'_, T, M> {
    fn drop(&mut self) {
        if let Some((slice, uses)) = &self.device {
            let stream = slice.stream();
            match uses.order_before(stream) {
                // Record a cudarc read of the scalar after those waits: a later write on another stream waits for it.
                Ok(()) => drop(slice.device_ptr(stream)),
                Err(error) => {
                    // Cannot order the scalar's free behind NCCL's reads: wait for them on the host instead.
                    tracing::error!(%error, "ordering a device scalar after its op's uses failed; synchronizing");
                    let _ = slice.context().synchronize();
                }
            }
        }
        if let Err(error) = self.comm.release_resource(self.id.0) {
            tracing::error!(%error, "ncclRedOpDestroy failed");
        }
    }
}

impl<T: Element, M: Mode> std::fmt::Debug for PreMulSum<'_, T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreMulSum").field("element", &T::NAME).field("op", &self.raw.0).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_custom_op_taken_before_close_all_resources_is_refused_after_it() {
        let registry = super::super::RegistryCell::default();
        let raw = sys::ncclRedOp_t(5);
        let (_, live) = super::super::insert(&registry, Native::RedOp(raw), None);
        let comm: ncclComm_t = std::ptr::null_mut();
        let datatype = <f32 as Element>::DATATYPE;
        let op = CustomOp { raw, datatype, comm, live: &live, uses: None };
        let copy = op;
        assert!(copy.check_matches(comm, datatype, "f32").is_ok());
        assert!(super::super::close_all(&registry, |_| Ok(())).is_empty());
        // Before: the handle carried whether the op was live when it was taken, and NCCL got the destroyed op.
        for handle in [op, copy] {
            match handle.check_matches(comm, datatype, "f32") {
                Err(Error::InvalidArgument { argument: "op", problem }) => {
                    assert!(problem.contains("close_all_resources"), "{problem}")
                }
                other => panic!("a destroyed op was accepted: {other:?}"),
            }
        }
    }
}
