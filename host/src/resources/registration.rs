//! Buffer registrations (`ncclCommRegister`): memory NCCL's collectives may use without copying.

use std::sync::Arc;

use cudarc::driver::{DeviceRepr, DeviceSlice};

use super::{InUse, Liveness, Registered, RegisteredMut};
use crate::comm::{Active, Communicator, Mode};
use crate::datatype::Element;
use crate::error::Error;
use crate::resources::{DeviceBuffer, Native, ResourceId};
use crate::result;

/// A buffer registered for zero-copy collectives (`ncclCommRegister`), which owns it. Deregistered on drop, once
/// the work this rank enqueued on the buffer has finished; the buffer is freed with it unless taken back with
/// [`into_buffer`](Registration::into_buffer).
///
/// Like a [`Window`](crate::Window), it lends the buffer's elements ([`buffer_mut`](Registration::buffer_mut)),
/// never the buffer: NCCL and the peers keep the registered memory mapped, so it cannot be replaced or freed while
/// registered.
pub struct Registration<'comm, T: DeviceRepr, M: Mode = crate::Blocking> {
    comm: &'comm Communicator<Active, M>,
    id: (ResourceId, Liveness),
    /// Shared only with the registry entry, whose release (`close_all_resources`) waits for the buffer's uses.
    buffer: Option<Arc<DeviceBuffer<T>>>,
}

impl<M: Mode> Communicator<Active, M> {
    /// Registers `buffer` with NCCL for zero-copy collectives (`ncclCommRegister`; local to this rank). The
    /// registration owns the buffer: use it through [`Registration::buffer`] and [`Registration::buffer_mut`].
    pub fn register<T: Element>(&self, buffer: DeviceBuffer<T>) -> Result<Registration<'_, T, M>, Error> {
        if buffer.stream().context().ordinal() != self.cuda_device() {
            return Err(Error::invalid("buffer", "lives on another device than this rank"));
        }
        self.context().bind_to_thread()?;
        // SAFETY: our live, active communicator; the buffer is device memory of this rank (ncclMemAlloc), owned by
        // the registration, which deregisters it before freeing it (or leaks both).
        let handle = unsafe {
            result::comm_register(self.library(), self.raw(), buffer.device_address() as _, buffer.num_bytes())
        }?;
        let buffer = Arc::new(buffer);
        let uses: Arc<dyn InUse> = buffer.clone();
        let id = self.register_tracked(Native::Registration(handle), Some(uses));
        Ok(Registration { comm: self, id, buffer: Some(buffer) })
    }
}

impl<'comm, T: Element, M: Mode> Registration<'comm, T, M> {
    /// The buffer, read-only (to read it, or pass it to collectives as a source).
    pub fn buffer(&self) -> &DeviceBuffer<T> {
        self.buffer.as_deref().expect("the buffer is only taken by into_buffer, which consumes the registration")
    }

    /// The buffer's elements, writable (a collective's destination, a kernel's `&mut [T]`, a copy from the host);
    /// never the buffer itself.
    pub fn buffer_mut(&mut self) -> RegisteredMut<'_, T> {
        RegisteredMut::whole(self.buffer())
    }

    /// The buffer's elements, read-only, as a view that can be narrowed ([`Registered::slice`]).
    pub fn view(&self) -> Registered<'_, T> {
        Registered::whole(self.buffer())
    }

    /// The number of elements registered.
    pub fn len(&self) -> usize {
        self.buffer().len()
    }

    /// Whether nothing is registered (never: buffers hold at least one element).
    pub fn is_empty(&self) -> bool {
        self.buffer().is_empty()
    }

    /// Whether the registration is still in place (an error once `close_all_resources` released it).
    pub fn check_live(&self) -> Result<(), Error> {
        self.id.1.check("registration")
    }

    /// The communicator the buffer is registered with.
    pub fn communicator(&self) -> &'comm Communicator<Active, M> {
        self.comm
    }

    /// Deregisters the buffer, once the work this rank enqueued on it has finished, and returns it.
    pub fn into_buffer(mut self) -> Result<DeviceBuffer<T>, Error> {
        self.buffer().wait_for_uses()?;
        self.comm.release_resource(self.id.0)?;
        let buffer = self.buffer.take().expect("a live registration always holds its buffer");
        // The registry entry, the only other holder, went with the release.
        Arc::try_unwrap(buffer).map_err(|_| Error::invalid("registration", "its buffer is still shared"))
    }
}

impl<T: DeviceRepr, M: Mode> Drop for Registration<'_, T, M> {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.as_ref() else {
            return; // into_buffer took it (and deregistered it)
        };
        // Collectives this rank enqueued may still use the registered memory (and its peers' mappings of theirs).
        if let Err(error) = buffer.wait_for_uses() {
            tracing::error!(
                %error,
                "waiting for a registered buffer's last use failed; leaking its registration and its memory (the \
                 communicator's abort or destroy frees the registration)"
            );
            std::mem::forget(self.buffer.take());
            return;
        }
        if let Err(error) = self.comm.release_resource(self.id.0) {
            tracing::error!(%error, "ncclCommDeregister failed");
        }
    }
}

impl<T: DeviceRepr, M: Mode> std::fmt::Debug for Registration<'_, T, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration").field("buffer", &self.buffer).finish_non_exhaustive()
    }
}
