//! Adopting a communicator weft did not create.

use std::mem::ManuallyDrop;
use std::ops::Deref;

use super::{read_identity, Active, Communicator};
use crate::error::Error;
use crate::sys::ncclComm_t;

/// A communicator made outside weft (by a framework, or by C code in the same process), used through weft without
/// weft owning it: collectives, windows, device communicators and weft kernels all work on it through `Deref`.
///
/// weft never finalizes, destroys, aborts, revokes or suspends it: those stay with its owner, and the transitions
/// that consume a `Communicator` are out of reach here. Dropping an `Adopted` does nothing to the NCCL
/// communicator. Its owner must drop every weft resource made on it (windows, registrations, device communicators)
/// and the `Adopted` itself before finalizing or destroying it — the borrow checker sees to the first part, since
/// those resources borrow the `Adopted`.
pub struct Adopted {
    comm: ManuallyDrop<Communicator<Active>>,
}

impl Communicator<Active> {
    /// Wraps `raw`, a communicator weft did not create, without taking ownership of it (see [`Adopted`]).
    ///
    /// # Safety
    /// - `raw` is an initialised, blocking NCCL communicator (its `ncclConfig_t.blocking` left at 1), made by the
    ///   very libnccl weft loaded (`weft_host::sys::library()?.path()`): a handle from another copy of the library
    ///   means nothing to this one.
    /// - It stays live, and nobody finalizes, destroys, aborts, revokes, suspends or shrinks it, until the returned
    ///   `Adopted` and everything weft made on it are dropped.
    /// - No other thread uses it through weft at the same time (NCCL's rule for one communicator; `Adopted` is not
    ///   `Sync`).
    pub unsafe fn adopt(raw: ncclComm_t) -> Result<Adopted, Error> {
        if raw.is_null() {
            return Err(Error::invalid("raw", "is a null communicator: adopt an initialised one"));
        }
        let library = crate::sys::library()?;
        let identity = read_identity(library, raw)?;
        let context = crate::cuda::context(usize::try_from(identity.cuda_device).unwrap_or(usize::MAX))?;
        let ranks_on_gpu = crate::placement::ranks_per_gpu_from_env()?;
        let comm =
            Communicator::from_parts(raw, library, context, Some(identity)).with_ranks_on_gpu_unchecked(ranks_on_gpu);
        Ok(Adopted { comm: ManuallyDrop::new(comm) })
    }
}

impl Deref for Adopted {
    type Target = Communicator<Active>;

    fn deref(&self) -> &Communicator<Active> {
        &self.comm
    }
}

impl Drop for Adopted {
    fn drop(&mut self) {
        // SAFETY: `comm` is never used again. Its handle is taken out first, so the communicator's own Drop (which
        // would abort it) finds nothing to do: NCCL's communicator stays its owner's.
        let comm = unsafe { ManuallyDrop::take(&mut self.comm) };
        let _ = comm.into_raw();
    }
}

impl std::fmt::Debug for Adopted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopted").field("comm", &*self.comm).finish()
    }
}
