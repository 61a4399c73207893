//! The host side of the barrier-free one-shot all-reduce + bias + residual
//! ([`allreduce_bias_residual_lamport`](crate::kernels::allreduce_lamport::allreduce_bias_residual_lamport()),
//! kernels/allreduce_lamport.rs): its window of three rotating buffers, the per-block round counters and the status
//! word, kept together so that the kernel's invariants hold between calls.

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaSlice, CudaStream};
use weft::host::caps::Lsa;
use weft::host::launch::{KernelSlice, KernelSliceMut};
use weft::host::{Communicator, DevComm, DeviceBuffer, Error, LaunchConfig, Window, WindowFlags};

use crate::kernels::allreduce_lamport::allreduce_bias_residual_lamport as kernel;

/// An element type of the Lamport kernel: its sentinel, negative zero, on the host.
pub trait LamportElement:
    weft::device::Float + weft::host::Element + cudarc::driver::ValidAsZeroBits + Clone + kernel::Instantiated
{
    /// `-0.0` in this type (the "not yet written" mark).
    fn negative_zero() -> Self;
}

impl LamportElement for f32 {
    fn negative_zero() -> Self {
        -0.0
    }
}

impl LamportElement for half::bf16 {
    fn negative_zero() -> Self {
        half::bf16::NEG_ZERO
    }
}

/// How long a block waits for a peer's pack before the round fails (`status`), unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// One rank's state for [`kernel()`] at one size: `n = rows × hidden` elements of `T`, launched with `cfg` on every
/// rank (the same grid everywhere).
pub struct LamportAllReduce<'comm, T: LamportElement> {
    lamport: Window<'comm, T>,
    rounds: DeviceBuffer<u32>,
    status: DeviceBuffer<u32>,
    cfg: LaunchConfig,
    n: usize,
    hidden: usize,
    timeout: Duration,
    /// A round failed: the buffers are in an unknown state until [`reset`](Self::reset).
    broken: std::cell::Cell<bool>,
    /// The communicator and stream of the collective step that ends a [`reset`](Self::reset), and its one word.
    comm: &'comm Communicator,
    stream: Arc<CudaStream>,
    fence: CudaSlice<u32>,
}

impl<'comm, T: LamportElement> LamportAllReduce<'comm, T> {
    /// The buffers for `n` elements of rows of `hidden` (a whole number of 16-byte packs), launched with at most
    /// `cfg`'s blocks (fewer when `n` needs fewer). Collective: every rank of `comm` calls it (the window is
    /// registered on all of them).
    pub fn new(
        comm: &'comm Communicator,
        stream: &Arc<CudaStream>,
        cfg: LaunchConfig,
        n: usize,
        hidden: usize,
    ) -> Result<Self, Error> {
        let lanes = weft::device::pack_lanes::<T>();
        if hidden == 0 || hidden % lanes != 0 || n % hidden != 0 {
            return Err(Error::InvalidArgument {
                argument: "hidden",
                problem: format!(
                    "the Lamport all-reduce moves whole 16-byte packs: rows of {hidden} {} elements are not a multiple \
                     of {lanes}, or {n} elements are not whole rows; use the one-shot kernel with barriers \
                     (allreduce_bias_residual_one_shot) for this shape",
                    T::NAME
                ),
            });
        }
        let peers =
            crate::common::require_one_lsa_team(comm, "the Lamport all-reduce (it pushes to every rank through LSA)")?;
        let lamport = comm.alloc_window::<T>(stream, 3 * peers * n, WindowFlags::COLL_SYMMETRIC)?;
        let rounds = DeviceBuffer::new(stream, cfg.grid_dim.0 as usize)?;
        let status = DeviceBuffer::new(stream, 1)?;
        let mut state = LamportAllReduce {
            lamport,
            rounds,
            status,
            cfg,
            n,
            hidden,
            timeout: DEFAULT_TIMEOUT,
            broken: false.into(),
            comm,
            stream: stream.clone(),
            fence: stream.alloc_zeros(1)?,
        };
        // The first fill is the reset's: every slot the sentinel, the rounds and the status zero.
        state.reset()?;
        Ok(state)
    }

    /// How long a block waits for a peer's pack before the round fails.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The launch geometry every rank uses.
    pub fn config(&self) -> LaunchConfig {
        self.cfg
    }

    /// `out = sum over ranks of x + bias + residual` (asynchronous). Every rank calls it the same number of times
    /// with the same sizes; [`check`](Self::check) says whether the rounds so far completed.
    pub fn launch(
        &mut self,
        stream: &Arc<CudaStream>,
        dev: &DevComm<'_, Lsa>,
        x: &impl KernelSlice<T>,
        bias: &impl KernelSlice<T>,
        residual: &impl KernelSlice<T>,
        out: &mut impl KernelSliceMut<T>,
    ) -> Result<(), Error> {
        self.usable()?;
        let timeout_ns = self.timeout_ns();
        kernel::launch(
            stream,
            self.cfg,
            dev,
            &self.lamport,
            &mut self.rounds,
            &mut self.status,
            x,
            bias,
            residual,
            out,
            self.n,
            self.hidden,
            timeout_ns,
        )
    }

    /// Records one round into a CUDA graph being captured (`weft::host::Graph::capture`): each replay is the next
    /// round (the rounds are counted on the device). Everything is borrowed for the graph's life, this state
    /// included; [`check`](Self::check) works between replays (after `Graph::settle`).
    #[allow(clippy::too_many_arguments)]
    pub fn record<'g>(
        &'g self,
        capture: &mut weft::host::Capture<'g>,
        dev: &'g DevComm<'_, Lsa>,
        x: &'g DeviceBuffer<T>,
        bias: &'g DeviceBuffer<T>,
        residual: &'g DeviceBuffer<T>,
        out: &'g DeviceBuffer<T>,
    ) -> Result<(), Error> {
        self.usable()?;
        kernel::record(
            capture,
            self.cfg,
            dev,
            &self.lamport,
            &self.rounds,
            &self.status,
            x,
            bias,
            residual,
            out,
            self.n,
            self.hidden,
            self.timeout_ns(),
        )
    }

    fn usable(&self) -> Result<(), Error> {
        if self.broken.get() {
            return Err(Error::InvalidArgument {
                argument: "self",
                problem: "a previous round of this Lamport all-reduce failed: call `reset` on every rank first".into(),
            });
        }
        Ok(())
    }

    fn timeout_ns(&self) -> u64 {
        u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Waits for the rounds launched so far and reports whether each found every peer's data in time:
    /// [`Error::Stalled`] if a wait timed out (a peer that never launched, or a timeout too short), after which the
    /// buffers must be [`reset`](Self::reset) on every rank.
    pub fn check(&self) -> Result<(), Error> {
        if self.status.copy_to_host()?[0] != 0 {
            self.broken.set(true);
            return Err(Error::Stalled {
                operation: "a Lamport all-reduce round (a peer's data did not arrive)",
                after: self.timeout,
            });
        }
        Ok(())
    }

    /// Refills the buffers with the sentinel and restarts the rounds. Collective, like the first fill: every rank
    /// calls it after its own kernels have stopped, and it returns once every rank has refilled, so that no peer's
    /// next round can store into a slot that a late refill then overwrites with the sentinel (that round would wait
    /// forever for data already erased).
    pub fn reset(&mut self) -> Result<(), Error> {
        let len = self.lamport.buffer().len();
        self.lamport.buffer_mut().copy_from_host(&vec![T::negative_zero(); len])?;
        let blocks = self.rounds.len();
        self.rounds.copy_from_host(&vec![0u32; blocks])?;
        self.status.copy_from_host(&[0u32])?;
        // The copies above are done when they return; an all-reduce on every rank's stream completes only once
        // every rank has reached it, so after it settles every rank's refill is done.
        self.comm.all_reduce_in_place(&mut self.fence, weft::host::ReduceOp::Sum, &self.stream)?;
        weft::host::cuda::settle(&self.stream)?;
        self.broken.set(false);
        Ok(())
    }
}
