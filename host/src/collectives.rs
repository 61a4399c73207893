//! Collectives, point-to-point and one-sided operations on an active communicator, typed by element.
//!
//! Buffers are cudarc's (`CudaSlice`, `CudaView`, `CudaViewMut`, or anything implementing its `DevicePtr`
//! traits) and weft's own [`DeviceBuffer`](crate::DeviceBuffer). Lengths, roots, peers and devices are
//! checked before NCCL sees them; a mismatch is [`Error::InvalidArgument`] naming the expected value.

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut};

use crate::comm::{Active, Communicator, Mode};
use crate::datatype::{Element, ReduceOp};
use crate::error::Error;
use crate::result::{self, Progress};
use crate::sys::{cudaStream_t, ncclDataType_t, ncclRedOp_t};

/// What [`Communicator::line_up_launch`] names when the ranks did not all come to a launch (also
/// `Window::put_signal`'s).
macro_rules! launch {
    ($call:literal) => {
        concat!(
            "the meeting of this process's ranks before ",
            $call,
            " (NCCL_LAUNCH_MODE=GROUP launches them together)"
        )
    };
}
pub(crate) use launch;

fn expect_len(argument: &'static str, got: usize, want: usize, rule: &str) -> Result<(), Error> {
    if got == want {
        Ok(())
    } else {
        Err(Error::invalid(argument, format!("holds {got} elements but must hold {want} ({rule})")))
    }
}

impl<M: Mode> Communicator<Active, M> {
    fn check_stream(&self, stream: &CudaStream) -> Result<cudaStream_t, Error> {
        let device = stream.context().ordinal();
        if device != self.cuda_device() {
            return Err(Error::invalid(
                "stream",
                format!(
                    "belongs to CUDA device {device}, but this rank runs on device {}: create the stream from \
                     `communicator.context()`",
                    self.cuda_device()
                ),
            ));
        }
        if self.ranks_on_gpu() > 1 {
            crate::cuda::note_shared_gpu_traffic(device);
        }
        Ok(stream.cu_stream().cast())
    }

    fn check_rank_arg(&self, argument: &'static str, rank: usize) -> Result<i32, Error> {
        if rank < self.nranks() {
            Ok(rank as i32)
        } else {
            Err(Error::invalid(argument, format!("rank {rank} is not below nranks {} (valid: 0..{0})", self.nranks())))
        }
    }

    fn check_op<T: Element>(&self, op: ReduceOp<'_>) -> Result<ncclRedOp_t, Error> {
        if let ReduceOp::Custom(custom) = op {
            custom.check_usable(self.raw(), T::DATATYPE, T::NAME)?;
        }
        Ok(op.raw())
    }

    /// Finishes an enqueue: a non-blocking communicator may report the enqueue as still in progress; it must
    /// complete before the next NCCL call, so wait for it here.
    fn enqueued(&self, progress: Progress) -> Result<(), Error> {
        let mut progress = progress;
        while progress == Progress::InProgress {
            std::thread::yield_now();
            // SAFETY: our live, active communicator.
            progress = unsafe { result::comm_get_async_error(self.library(), self.raw()) }?;
        }
        Ok(())
    }

    /// Reduces `send` across all ranks into every rank's `recv` (`ncclAllReduce`). Equal lengths.
    pub fn all_reduce<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let count = send.len();
        expect_len("recv", recv.len(), count, "all_reduce writes as many elements as it reads")?;
        let op = self.check_op::<T>(op)?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclAllReduce"))?;
        // SAFETY: both buffers hold `count` elements of T on this rank's device (lengths checked, device of
        // the stream checked) and the guards keep them borrowed until the operation is enqueued; cudarc's
        // stream ordering keeps them alive until it completes.
        let progress = unsafe {
            result::all_reduce(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                op,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// [`all_reduce`](Self::all_reduce) with the result written over the input.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &mut impl DevicePtrMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let count = buffer.len();
        let op = self.check_op::<T>(op)?;
        let (ptr, _write) = buffer.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclAllReduce"))?;
        // SAFETY: as in `all_reduce`; NCCL supports send == recv.
        let progress = unsafe {
            result::all_reduce(self.library(), ptr as _, ptr as _, count, T::DATATYPE, op, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// Copies `root`'s `send` into every rank's `recv` (`ncclBroadcast`). `send` is read on the root only,
    /// but must have the same length everywhere.
    pub fn broadcast<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        let count = recv.len();
        expect_len("send", send.len(), count, "broadcast sends as many elements as it receives")?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclBroadcast"))?;
        // SAFETY: as in `all_reduce`.
        let progress = unsafe {
            result::broadcast(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                root,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// [`broadcast`](Self::broadcast) in one buffer: the root's contents overwrite everyone else's.
    pub fn broadcast_in_place<T: Element>(
        &self,
        buffer: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        let count = buffer.len();
        let (ptr, _write) = buffer.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclBroadcast"))?;
        // SAFETY: as in `all_reduce`.
        let progress = unsafe {
            result::broadcast(self.library(), ptr as _, ptr as _, count, T::DATATYPE, root, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// Reduces `send` across ranks into `root`'s `recv` (`ncclReduce`); `recv` is written on the root only.
    pub fn reduce<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp<'_>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        let count = send.len();
        expect_len("recv", recv.len(), count, "reduce writes as many elements as it reads")?;
        let op = self.check_op::<T>(op)?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclReduce"))?;
        // SAFETY: as in `all_reduce`.
        let progress = unsafe {
            result::reduce(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                op,
                root,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// Concatenates every rank's `send` into every rank's `recv`, in rank order (`ncclAllGather`):
    /// `recv.len() == send.len() * nranks`.
    pub fn all_gather<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let count = send.len();
        expect_len("recv", recv.len(), count * self.nranks(), "send.len() * nranks")?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclAllGather"))?;
        // SAFETY: as in `all_reduce`, with recv holding nranks * count elements.
        let progress = unsafe {
            result::all_gather(self.library(), send_ptr as _, recv_ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// Reduces `send` across ranks and leaves block `rank` of the result in `recv` (`ncclReduceScatter`):
    /// `send.len() == recv.len() * nranks`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let count = recv.len();
        expect_len("send", send.len(), count * self.nranks(), "recv.len() * nranks")?;
        let op = self.check_op::<T>(op)?;
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclReduceScatter"))?;
        // SAFETY: as in `all_reduce`, with send holding nranks * count elements.
        let progress = unsafe {
            result::reduce_scatter(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                op,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// [`all_gather`](Self::all_gather) in one buffer of `count * nranks` elements: this rank's contribution
    /// is block `rank` of `buffer` (NCCL's in-place form).
    pub fn all_gather_in_place<T: Element>(
        &self,
        buffer: &mut impl DevicePtrMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let total = buffer.len();
        if total % self.nranks() != 0 {
            return Err(Error::invalid(
                "buffer",
                format!("{total} elements do not split into {} equal blocks", self.nranks()),
            ));
        }
        let count = total / self.nranks();
        let (ptr, _write) = buffer.device_ptr_mut(stream);
        let send = ptr + (self.rank() * count * std::mem::size_of::<T>()) as u64;
        self.line_up_launch(launch!("ncclAllGather"))?;
        // SAFETY: as in `all_reduce`; the send block lies inside the buffer at this rank's offset, which is the
        // layout NCCL documents for in-place all-gather.
        let progress = unsafe {
            result::all_gather(self.library(), send as _, ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// [`reduce_scatter`](Self::reduce_scatter) in one buffer of `count * nranks` elements: the result lands in
    /// block `rank` of `buffer` (NCCL's in-place form).
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buffer: &mut impl DevicePtrMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let total = buffer.len();
        if total % self.nranks() != 0 {
            return Err(Error::invalid(
                "buffer",
                format!("{total} elements do not split into {} equal blocks", self.nranks()),
            ));
        }
        let count = total / self.nranks();
        let op = self.check_op::<T>(op)?;
        let (ptr, _write) = buffer.device_ptr_mut(stream);
        let recv = ptr + (self.rank() * count * std::mem::size_of::<T>()) as u64;
        self.line_up_launch(launch!("ncclReduceScatter"))?;
        // SAFETY: as in `all_reduce`; the receive block lies inside the buffer at this rank's offset.
        let progress = unsafe {
            result::reduce_scatter(self.library(), ptr as _, recv as _, count, T::DATATYPE, op, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// Sends block `j` of `send` to rank `j` and receives rank `j`'s block into block `j` of `recv`
    /// (`ncclAlltoAll`): equal lengths, a multiple of nranks.
    pub fn all_to_all<T: Element>(
        &self,
        send: &impl DevicePtr<T>,
        recv: &mut impl DevicePtrMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let total = send.len();
        expect_len("recv", recv.len(), total, "all_to_all receives as many elements as it sends")?;
        if total % self.nranks() != 0 {
            return Err(Error::invalid(
                "send",
                format!("{total} elements do not split into {} equal blocks", self.nranks()),
            ));
        }
        let count = total / self.nranks();
        let (send_ptr, _read) = send.device_ptr(stream);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclAlltoAll"))?;
        // SAFETY: as in `all_reduce`.
        let progress = unsafe {
            result::all_to_all(self.library(), send_ptr as _, recv_ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)
    }

    /// Collects every rank's `send` on `root`, in rank order (`ncclGather`). The root passes
    /// `Some(recv)` with `send.len() * nranks` elements; the others pass `None`.
    pub fn gather<T: Element, R: DevicePtrMut<T>>(
        &self,
        send: &impl DevicePtr<T>,
        recv: Option<&mut R>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let root_c = self.check_rank_arg("root", root)?;
        let count = send.len();
        let is_root = self.rank() == root;
        match (&recv, is_root) {
            (Some(recv), true) => expect_len("recv", recv.len(), count * self.nranks(), "send.len() * nranks")?,
            (None, true) => return Err(Error::invalid("recv", "the root must pass a receive buffer")),
            (Some(_), false) => return Err(Error::invalid("recv", "only the root receives: pass None on other ranks")),
            (None, false) => {}
        }
        let (send_ptr, _read) = send.device_ptr(stream);
        let recv_guard = recv.map(|r| r.device_ptr_mut(stream));
        let recv_ptr = recv_guard.as_ref().map_or(0, |(ptr, _)| *ptr);
        self.line_up_launch(launch!("ncclGather"))?;
        // SAFETY: as in `all_reduce`; on non-root ranks NCCL ignores the (null) receive buffer.
        let progress = unsafe {
            result::gather(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                root_c,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// Distributes block `j` of `root`'s `send` to rank `j`'s `recv` (`ncclScatter`). The root passes
    /// `Some(send)` with `recv.len() * nranks` elements; the others pass `None`.
    pub fn scatter<T: Element, S: DevicePtr<T>>(
        &self,
        send: Option<&S>,
        recv: &mut impl DevicePtrMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let root_c = self.check_rank_arg("root", root)?;
        let count = recv.len();
        let is_root = self.rank() == root;
        match (&send, is_root) {
            (Some(send), true) => expect_len("send", send.len(), count * self.nranks(), "recv.len() * nranks")?,
            (None, true) => return Err(Error::invalid("send", "the root must pass a send buffer")),
            (Some(_), false) => return Err(Error::invalid("send", "only the root sends: pass None on other ranks")),
            (None, false) => {}
        }
        let send_guard = send.map(|s| s.device_ptr(stream));
        let send_ptr = send_guard.as_ref().map_or(0, |(ptr, _)| *ptr);
        let (recv_ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclScatter"))?;
        // SAFETY: as in `all_reduce`; on non-root ranks NCCL ignores the (null) send buffer.
        let progress = unsafe {
            result::scatter(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                root_c,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)
    }

    /// Sends `send` to `peer` (`ncclSend`); `peer` posts a matching [`recv`](Self::recv). Pair sends and
    /// receives inside a [`group`](crate::group()) to avoid deadlock.
    pub fn send<T: Element>(&self, send: &impl DevicePtr<T>, peer: usize, stream: &CudaStream) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let (ptr, _read) = send.device_ptr(stream);
        self.line_up_launch(launch!("ncclSend"))?;
        // SAFETY: as in `all_reduce`.
        let progress =
            unsafe { result::send(self.library(), ptr as _, send.len(), T::DATATYPE, peer, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }

    /// Receives `recv.len()` elements from `peer` (`ncclRecv`).
    pub fn recv<T: Element>(
        &self,
        recv: &mut impl DevicePtrMut<T>,
        peer: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let count = recv.len();
        let (ptr, _write) = recv.device_ptr_mut(stream);
        self.line_up_launch(launch!("ncclRecv"))?;
        // SAFETY: as in `all_reduce`.
        let progress =
            unsafe { result::recv(self.library(), ptr as _, count, T::DATATYPE, peer, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }

    /// Sends a signal without data to `peer` (`ncclSignal`, NCCL 2.29+).
    pub fn signal(&self, peer: usize, signal_index: u32, stream: &CudaStream) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let index = i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?;
        self.line_up_launch(launch!("ncclSignal"))?;
        // SAFETY: our live communicator and a stream of its device.
        let progress = unsafe { result::signal(self.library(), peer, index, 0, 0, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }

    /// Waits on `stream` until `count` signals with index `signal_index` arrived from `peer`
    /// (`ncclWaitSignal`, NCCL 2.29+).
    pub fn wait_signal(&self, peer: usize, signal_index: u32, count: u32, stream: &CudaStream) -> Result<(), Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let mut descriptor = [crate::sys::ncclWaitSignalDesc_t {
            opCnt: i32::try_from(count).map_err(|_| Error::invalid("count", "exceeds i32::MAX"))?,
            peer,
            sigIdx: i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?,
            ctx: 0,
        }];
        self.line_up_launch(launch!("ncclWaitSignal"))?;
        // SAFETY: our live communicator, a stream of its device, one valid descriptor.
        let progress = unsafe { result::wait_signal(self.library(), &mut descriptor, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }
}

/// The datatype of `T`, for code that calls the result layer directly (benchmarks).
pub fn datatype_of<T: Element>() -> ncclDataType_t {
    T::DATATYPE
}
