//! Collectives, point-to-point and one-sided operations on an active communicator, typed by element.
//!
//! Buffers are cudarc's (`CudaSlice`, `CudaView`, `CudaViewMut`) and weft's own [`DeviceBuffer`](crate::DeviceBuffer),
//! through the sealed [`NcclBuffer`] / [`NcclBufferMut`] traits: NCCL is handed each buffer's address and an element
//! count, so only memory whose address and length weft can vouch for is accepted (cudarc's `DevicePtr` traits are
//! safe to implement with any address). Lengths, roots, peers and devices are checked before NCCL sees them
//! (`counts`); a mismatch is [`Error::InvalidArgument`] naming the expected value.
//!
//! Inside an NCCL group NCCL only queues an operation and enqueues it at the group's end, when the borrows of a
//! call like these have long ended: so these calls refuse to run inside a group, and [`Batch`] groups operations
//! while holding their buffers until the group has launched them. On a stream that something else is capturing
//! into a CUDA graph (cudarc's `begin_capture`) they refuse too: such a graph could replay them after the buffers
//! are freed ([`crate::graph::Graph`] records collectives with borrows for the graph's life).

use cudarc::driver::{CudaStream, SyncOnDrop};

use crate::comm::{Active, Communicator, Mode};
use crate::datatype::{Element, ReduceOp};
use crate::error::Error;
use crate::launch::buffers::sealed::{Buffer, BufferMut};
use crate::result::{self, Progress};
use crate::sys::{cudaStream_t, ncclDataType_t, ncclRedOp_t};

mod batch;
pub(crate) mod counts;

pub use crate::launch::{NcclBuffer, NcclBufferMut};
pub use batch::Batch;

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

/// What an operation NCCL has been handed still owes once NCCL enqueued it: each buffer's use recorded on the
/// stream (what later uses on other streams and the buffers' frees wait for), and a device-scalar custom op's
/// use ([`crate::PreMulSum`]). Dropped right after the call, or, in a [`Batch`], after the group's end (when
/// NCCL actually enqueues).
#[must_use]
pub(crate) struct Enqueued<'a> {
    _buffers: [Option<SyncOnDrop<'a>>; 2],
    op: Option<(crate::resources::CustomOp<'a>, &'a CudaStream)>,
}

impl Drop for Enqueued<'_> {
    fn drop(&mut self) {
        if let Some((op, stream)) = self.op.take() {
            op.note_enqueued(stream);
        }
    }
}

impl<'a> Enqueued<'a> {
    fn new(first: Option<SyncOnDrop<'a>>, second: Option<SyncOnDrop<'a>>) -> Enqueued<'a> {
        Enqueued { _buffers: [first, second], op: None }
    }

    /// Drops the guards without noting a custom op's use on the stream: for a capture, whose stream only records
    /// (the replay stream is noted instead).
    pub(crate) fn recorded(mut self) {
        self.op = None;
    }

    fn with_op(mut self, op: ReduceOp<'a>, stream: &'a CudaStream) -> Enqueued<'a> {
        if let ReduceOp::Custom(custom) = op {
            self.op = Some((custom, stream));
        }
        self
    }
}

/// Refuses a buffer-taking NCCL call made directly inside an open NCCL group (see the module docs).
pub(crate) fn refuse_in_group(call: &'static str) -> Result<(), Error> {
    if crate::group::in_group() {
        return Err(Error::invalid(
            "self",
            format!(
                "{call} inside an NCCL group: NCCL enqueues it only when the group ends, after this call's borrows of \
                 its buffers have ended, so a buffer could be freed or rewritten before NCCL reads it. Add the \
                 operation to a `weft_host::Batch` instead (it holds the buffers until the group has launched)"
            ),
        ));
    }
    Ok(())
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

    /// The checks of an operation issued at once (not in a [`Batch`], not recorded into a graph).
    fn eager(&self, call: &'static str, stream: &CudaStream) -> Result<(), Error> {
        refuse_in_group(call)?;
        crate::graph::refuse_foreign_capture(call, stream)
    }

    /// Whether `buffer` lives on this rank's device.
    fn check_buffer<T>(&self, argument: &'static str, buffer: &(impl Buffer<T> + ?Sized)) -> Result<(), Error> {
        let device = buffer.buffer_stream().context().ordinal();
        if device == self.cuda_device() {
            return Ok(());
        }
        Err(Error::invalid(
            argument,
            format!("lives on CUDA device {device}, but this rank runs on device {}", self.cuda_device()),
        ))
    }

    fn check_rank_arg(&self, argument: &'static str, rank: usize) -> Result<i32, Error> {
        if rank < self.nranks() {
            Ok(rank as i32)
        } else {
            Err(Error::invalid(argument, format!("rank {rank} is not below nranks {} (valid: 0..{0})", self.nranks())))
        }
    }

    fn check_op<T: Element>(&self, op: ReduceOp<'_>, stream: &CudaStream) -> Result<ncclRedOp_t, Error> {
        if let ReduceOp::Custom(custom) = op {
            custom.check_usable(self.raw(), T::DATATYPE, T::NAME, stream)?;
        }
        Ok(op.raw())
    }

    /// Finishes an enqueue: a non-blocking communicator may report the enqueue as still in progress; it must
    /// complete before the next NCCL call, so wait for it here.
    pub(crate) fn enqueued(&self, progress: Progress) -> Result<(), Error> {
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
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("all_reduce", stream)?;
        self.all_reduce_enqueue(send, recv, op, stream).map(drop)
    }

    pub(crate) fn all_reduce_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        op: ReduceOp<'a>,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count =
            counts::same(send.buffer_len(), recv.buffer_len(), "all_reduce writes as many elements as it reads")?;
        let raw_op = self.check_op::<T>(op, stream)?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclAllReduce"))?;
        // SAFETY: both buffers hold `count` elements of T (sealed types, lengths checked) on this rank's device
        // (checked, as is the stream's), and are borrowed until the returned guards record their use after NCCL
        // enqueued the operation; their frees wait for that use.
        let progress = unsafe {
            result::all_reduce(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                raw_op,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)).with_op(op, stream))
    }

    /// [`all_reduce`](Self::all_reduce) with the result written over the input.
    pub fn all_reduce_in_place<T: Element>(
        &self,
        buffer: &mut impl NcclBufferMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("all_reduce_in_place", stream)?;
        self.all_reduce_in_place_enqueue(buffer, op, stream).map(drop)
    }

    pub(crate) fn all_reduce_in_place_enqueue<'a, T: Element>(
        &'a self,
        buffer: &'a mut (impl BufferMut<T> + ?Sized),
        op: ReduceOp<'a>,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("buffer", buffer)?;
        let count = buffer.buffer_len();
        let raw_op = self.check_op::<T>(op, stream)?;
        let (ptr, write) = buffer.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclAllReduce"))?;
        // SAFETY: as in `all_reduce_enqueue`; NCCL supports send == recv.
        let progress = unsafe {
            result::all_reduce(self.library(), ptr as _, ptr as _, count, T::DATATYPE, raw_op, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(write), None).with_op(op, stream))
    }

    /// Copies `root`'s `send` into every rank's `recv` (`ncclBroadcast`). `send` is read on the root only,
    /// but must have the same length everywhere.
    pub fn broadcast<T: Element>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("broadcast", stream)?;
        self.broadcast_enqueue(send, recv, root, stream).map(drop)
    }

    pub(crate) fn broadcast_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        root: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count =
            counts::same(send.buffer_len(), recv.buffer_len(), "broadcast receives as many elements as it sends")?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclBroadcast"))?;
        // SAFETY: as in `all_reduce_enqueue`.
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
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)))
    }

    /// [`broadcast`](Self::broadcast) in one buffer: the root's contents overwrite everyone else's.
    pub fn broadcast_in_place<T: Element>(
        &self,
        buffer: &mut impl NcclBufferMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("broadcast_in_place", stream)?;
        self.broadcast_in_place_enqueue(buffer, root, stream).map(drop)
    }

    pub(crate) fn broadcast_in_place_enqueue<'a, T: Element>(
        &'a self,
        buffer: &'a mut (impl BufferMut<T> + ?Sized),
        root: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        self.check_buffer("buffer", buffer)?;
        let count = buffer.buffer_len();
        let (ptr, write) = buffer.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclBroadcast"))?;
        // SAFETY: as in `all_reduce_enqueue`.
        let progress = unsafe {
            result::broadcast(self.library(), ptr as _, ptr as _, count, T::DATATYPE, root, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(write), None))
    }

    /// Reduces `send` across ranks into `root`'s `recv` (`ncclReduce`); `recv` is written on the root only.
    pub fn reduce<T: Element>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        op: ReduceOp<'_>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("reduce", stream)?;
        self.reduce_enqueue(send, recv, op, root, stream).map(drop)
    }

    pub(crate) fn reduce_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        op: ReduceOp<'a>,
        root: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let root = self.check_rank_arg("root", root)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count = counts::same(send.buffer_len(), recv.buffer_len(), "reduce writes as many elements as it reads")?;
        let raw_op = self.check_op::<T>(op, stream)?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclReduce"))?;
        // SAFETY: as in `all_reduce_enqueue`.
        let progress = unsafe {
            result::reduce(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                raw_op,
                root,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)).with_op(op, stream))
    }

    /// Concatenates every rank's `send` into every rank's `recv`, in rank order (`ncclAllGather`):
    /// `recv.len() == send.len() * nranks`.
    pub fn all_gather<T: Element>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("all_gather", stream)?;
        self.all_gather_enqueue(send, recv, stream).map(drop)
    }

    pub(crate) fn all_gather_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count = counts::all_gather(send.buffer_len(), recv.buffer_len(), self.nranks())?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclAllGather"))?;
        // SAFETY: as in `all_reduce_enqueue`, with recv holding nranks * count elements (checked).
        let progress = unsafe {
            result::all_gather(self.library(), send_ptr as _, recv_ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)))
    }

    /// Reduces `send` across ranks and leaves block `rank` of the result in `recv` (`ncclReduceScatter`):
    /// `send.len() == recv.len() * nranks`.
    pub fn reduce_scatter<T: Element>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("reduce_scatter", stream)?;
        self.reduce_scatter_enqueue(send, recv, op, stream).map(drop)
    }

    pub(crate) fn reduce_scatter_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        op: ReduceOp<'a>,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count = counts::reduce_scatter(send.buffer_len(), recv.buffer_len(), self.nranks())?;
        let raw_op = self.check_op::<T>(op, stream)?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclReduceScatter"))?;
        // SAFETY: as in `all_reduce_enqueue`, with send holding nranks * count elements (checked).
        let progress = unsafe {
            result::reduce_scatter(
                self.library(),
                send_ptr as _,
                recv_ptr as _,
                count,
                T::DATATYPE,
                raw_op,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)).with_op(op, stream))
    }

    /// [`all_gather`](Self::all_gather) in one buffer of `count * nranks` elements: this rank's contribution
    /// is block `rank` of `buffer` (NCCL's in-place form).
    pub fn all_gather_in_place<T: Element>(
        &self,
        buffer: &mut impl NcclBufferMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("all_gather_in_place", stream)?;
        self.all_gather_in_place_enqueue(buffer, stream).map(drop)
    }

    pub(crate) fn all_gather_in_place_enqueue<'a, T: Element>(
        &'a self,
        buffer: &'a mut (impl BufferMut<T> + ?Sized),
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("buffer", buffer)?;
        let count = counts::blocks("buffer", buffer.buffer_len(), self.nranks())?;
        let (ptr, write) = buffer.write_address(stream, None)?;
        let send = ptr + (self.rank() * count * std::mem::size_of::<T>()) as u64;
        self.line_up_launch(launch!("ncclAllGather"))?;
        // SAFETY: as in `all_reduce_enqueue`; the send block lies inside the buffer at this rank's offset, which is
        // the layout NCCL documents for in-place all-gather.
        let progress = unsafe {
            result::all_gather(self.library(), send as _, ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(write), None))
    }

    /// [`reduce_scatter`](Self::reduce_scatter) in one buffer of `count * nranks` elements: the result lands in
    /// block `rank` of `buffer` (NCCL's in-place form).
    pub fn reduce_scatter_in_place<T: Element>(
        &self,
        buffer: &mut impl NcclBufferMut<T>,
        op: ReduceOp<'_>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("reduce_scatter_in_place", stream)?;
        self.reduce_scatter_in_place_enqueue(buffer, op, stream).map(drop)
    }

    pub(crate) fn reduce_scatter_in_place_enqueue<'a, T: Element>(
        &'a self,
        buffer: &'a mut (impl BufferMut<T> + ?Sized),
        op: ReduceOp<'a>,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("buffer", buffer)?;
        let count = counts::blocks("buffer", buffer.buffer_len(), self.nranks())?;
        let raw_op = self.check_op::<T>(op, stream)?;
        let (ptr, write) = buffer.write_address(stream, None)?;
        let recv = ptr + (self.rank() * count * std::mem::size_of::<T>()) as u64;
        self.line_up_launch(launch!("ncclReduceScatter"))?;
        // SAFETY: as in `all_reduce_enqueue`; the receive block lies inside the buffer at this rank's offset.
        let progress = unsafe {
            result::reduce_scatter(
                self.library(),
                ptr as _,
                recv as _,
                count,
                T::DATATYPE,
                raw_op,
                self.raw(),
                raw_stream,
            )
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(write), None).with_op(op, stream))
    }

    /// Sends block `j` of `send` to rank `j` and receives rank `j`'s block into block `j` of `recv`
    /// (`ncclAlltoAll`): equal lengths, a multiple of nranks.
    pub fn all_to_all<T: Element>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: &mut impl NcclBufferMut<T>,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("all_to_all", stream)?;
        self.all_to_all_enqueue(send, recv, stream).map(drop)
    }

    pub(crate) fn all_to_all_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("send", send)?;
        self.check_buffer("recv", recv)?;
        let count = counts::all_to_all(send.buffer_len(), recv.buffer_len(), self.nranks())?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclAlltoAll"))?;
        // SAFETY: as in `all_reduce_enqueue`: both hold nranks blocks of `count` elements (checked).
        let progress = unsafe {
            result::all_to_all(self.library(), send_ptr as _, recv_ptr as _, count, T::DATATYPE, self.raw(), raw_stream)
        }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), Some(write)))
    }

    /// Collects every rank's `send` on `root`, in rank order (`ncclGather`). The root passes
    /// `Some(recv)` with `send.len() * nranks` elements; the others pass `None`.
    pub fn gather<T: Element, R: NcclBufferMut<T>>(
        &self,
        send: &impl NcclBuffer<T>,
        recv: Option<&mut R>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("gather", stream)?;
        self.gather_enqueue(send, recv, root, stream).map(drop)
    }

    pub(crate) fn gather_enqueue<'a, T: Element, R: BufferMut<T> + ?Sized>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        recv: Option<&'a mut R>,
        root: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let root_c = self.check_rank_arg("root", root)?;
        self.check_buffer("send", send)?;
        if let Some(recv) = &recv {
            self.check_buffer("recv", &**recv)?;
        }
        let count = counts::gather(
            send.buffer_len(),
            recv.as_ref().map(|r| r.buffer_len()),
            self.nranks(),
            self.rank() == root,
        )?;
        let (send_ptr, read) = send.read_address(stream, None)?;
        let (recv_ptr, write) = match recv {
            Some(recv) => {
                let (ptr, guard) = recv.write_address(stream, None)?;
                (ptr, Some(guard))
            }
            None => (0, None),
        };
        self.line_up_launch(launch!("ncclGather"))?;
        // SAFETY: as in `all_reduce_enqueue`; the root's receive buffer holds nranks * count elements (checked); on
        // other ranks NCCL ignores the (null) receive buffer.
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
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), write))
    }

    /// Distributes block `j` of `root`'s `send` to rank `j`'s `recv` (`ncclScatter`). The root passes
    /// `Some(send)` with `recv.len() * nranks` elements; the others pass `None`.
    pub fn scatter<T: Element, S: NcclBuffer<T>>(
        &self,
        send: Option<&S>,
        recv: &mut impl NcclBufferMut<T>,
        root: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("scatter", stream)?;
        self.scatter_enqueue(send, recv, root, stream).map(drop)
    }

    pub(crate) fn scatter_enqueue<'a, T: Element, S: Buffer<T> + ?Sized>(
        &'a self,
        send: Option<&'a S>,
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        root: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let root_c = self.check_rank_arg("root", root)?;
        if let Some(send) = send {
            self.check_buffer("send", send)?;
        }
        self.check_buffer("recv", recv)?;
        let count =
            counts::scatter(send.map(|s| s.buffer_len()), recv.buffer_len(), self.nranks(), self.rank() == root)?;
        let (send_ptr, read) = match send {
            Some(send) => {
                let (ptr, guard) = send.read_address(stream, None)?;
                (ptr, Some(guard))
            }
            None => (0, None),
        };
        let (recv_ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclScatter"))?;
        // SAFETY: as in `all_reduce_enqueue`; the root's send buffer holds nranks * count elements (checked); on
        // other ranks NCCL ignores the (null) send buffer.
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
        self.enqueued(progress)?;
        Ok(Enqueued::new(read, Some(write)))
    }

    /// Sends `send` to `peer` (`ncclSend`); `peer` posts a matching [`recv`](Self::recv) of as many elements.
    ///
    /// A send and its receive block each other until both are posted, and NCCL enqueues only at the end of a
    /// group: pair them in a [`Batch`] (one group), since these calls refuse to run inside an open group.
    pub fn send<T: Element>(&self, send: &impl NcclBuffer<T>, peer: usize, stream: &CudaStream) -> Result<(), Error> {
        self.eager("send", stream)?;
        self.send_enqueue(send, peer, stream).map(drop)
    }

    pub(crate) fn send_enqueue<'a, T: Element>(
        &'a self,
        send: &'a (impl Buffer<T> + ?Sized),
        peer: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        self.check_buffer("send", send)?;
        let count = send.buffer_len();
        let (ptr, read) = send.read_address(stream, None)?;
        self.line_up_launch(launch!("ncclSend"))?;
        // SAFETY: as in `all_reduce_enqueue`: `send` holds `count` elements.
        let progress =
            unsafe { result::send(self.library(), ptr as _, count, T::DATATYPE, peer, self.raw(), raw_stream) }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(read), None))
    }

    /// Receives `recv.len()` elements from `peer` (`ncclRecv`); see [`send`](Self::send) for pairing.
    pub fn recv<T: Element>(
        &self,
        recv: &mut impl NcclBufferMut<T>,
        peer: usize,
        stream: &CudaStream,
    ) -> Result<(), Error> {
        self.eager("recv", stream)?;
        self.recv_enqueue(recv, peer, stream).map(drop)
    }

    pub(crate) fn recv_enqueue<'a, T: Element>(
        &'a self,
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        peer: usize,
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        self.check_buffer("recv", recv)?;
        let count = recv.buffer_len();
        let (ptr, write) = recv.write_address(stream, None)?;
        self.line_up_launch(launch!("ncclRecv"))?;
        // SAFETY: as in `all_reduce_enqueue`: NCCL writes at most `count` elements into `recv`, which holds them (a
        // larger matching send is NCCL's error, not an overrun).
        let progress =
            unsafe { result::recv(self.library(), ptr as _, count, T::DATATYPE, peer, self.raw(), raw_stream) }?;
        self.enqueued(progress)?;
        Ok(Enqueued::new(Some(write), None))
    }

    /// Sends a signal without data to `peer` (`ncclSignal`, NCCL 2.29+).
    pub fn signal(&self, peer: usize, signal_index: u32, stream: &CudaStream) -> Result<(), Error> {
        crate::graph::refuse_foreign_capture("signal", stream)?;
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let index = i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?;
        self.line_up_launch(launch!("ncclSignal"))?;
        // SAFETY: our live communicator and a stream of its device; no memory of ours is involved.
        let progress = unsafe { result::signal(self.library(), peer, index, 0, 0, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }

    /// Waits on `stream` until `count` signals with index `signal_index` arrived from `peer`
    /// (`ncclWaitSignal`, NCCL 2.29+).
    pub fn wait_signal(&self, peer: usize, signal_index: u32, count: u32, stream: &CudaStream) -> Result<(), Error> {
        crate::graph::refuse_foreign_capture("wait_signal", stream)?;
        let raw_stream = self.check_stream(stream)?;
        let peer = self.check_rank_arg("peer", peer)?;
        let mut descriptor = [crate::sys::ncclWaitSignalDesc_t {
            opCnt: i32::try_from(count).map_err(|_| Error::invalid("count", "exceeds i32::MAX"))?,
            peer,
            sigIdx: i32::try_from(signal_index).map_err(|_| Error::invalid("signal_index", "exceeds i32::MAX"))?,
            ctx: 0,
        }];
        self.line_up_launch(launch!("ncclWaitSignal"))?;
        // SAFETY: our live communicator, a stream of its device, one valid descriptor (read during the call).
        let progress = unsafe { result::wait_signal(self.library(), &mut descriptor, self.raw(), raw_stream) }?;
        self.enqueued(progress)
    }
}

/// The datatype of `T`, for code that calls the result layer directly (benchmarks).
pub fn datatype_of<T: Element>() -> ncclDataType_t {
    T::DATATYPE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::test_support::{close_without_nccl, open_without_nccl};

    #[test]
    fn buffer_taking_calls_refuse_to_run_inside_a_group() {
        assert!(refuse_in_group("all_reduce").is_ok(), "outside a group they run");
        open_without_nccl();
        let refused = refuse_in_group("all_reduce");
        // A batch cannot launch inside an open group either: only the outer group's end would enqueue it.
        let nested = Batch::new().launch();
        assert_eq!(close_without_nccl(Ok(Progress::Done)).unwrap(), Progress::Done);
        let text = refused.unwrap_err().to_string();
        assert!(text.contains("all_reduce inside an NCCL group") && text.contains("weft_host::Batch"), "{text}");
        let text = nested.unwrap_err().to_string();
        assert!(text.contains("inside an open NCCL group"), "{text}");
        assert!(refuse_in_group("all_reduce").is_ok(), "and run again once it ended");
    }
}
