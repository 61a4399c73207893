//! [`Batch`]: NCCL operations launched together in one NCCL group, their buffers borrowed until NCCL has them.
//!
//! Inside a group NCCL only queues each call and enqueues the whole group's work on the streams at the outermost
//! `ncclGroupEnd`. A borrow that ends when the call returns (as `Communicator::send`'s would) lets the buffer be
//! freed or rewritten before NCCL reads it, so the plain calls refuse to run inside a group, and a batch holds
//! every buffer for `'b` instead: until [`Batch::launch`] has ended the group (and, on a non-blocking
//! communicator, NCCL reports the enqueue complete), and only then records each buffer's use on its stream.

use std::ops::Range;

use cudarc::driver::CudaStream;

use super::Enqueued;
use crate::comm::{Active, Communicator, Mode};
use crate::datatype::{Element, ReduceOp};
use crate::error::Error;
use crate::launch::buffers::sealed::BufferMut;
use crate::launch::{NcclBuffer, NcclBufferMut};
use crate::result::{self, Progress};
use crate::sys::{ncclComm_t, Library};

type Deferred<'b> = Box<dyn FnOnce() -> Result<Enqueued<'b>, Error> + 'b>;

/// NCCL operations issued together in one NCCL group by [`launch`](Batch::launch) (`ncclGroupStart`, each
/// operation, `ncclGroupEnd`), on one or several communicators: sends and receives that must be posted together,
/// or collectives NCCL may fuse. Every buffer is borrowed for `'b`, so none can be dropped, moved or written before
/// the group has launched them.
///
/// ```no_run
/// # fn demo(comm: &weft_host::Communicator, a: &cudarc::driver::CudaSlice<f32>, b: &mut cudarc::driver::CudaSlice<f32>, s: &cudarc::driver::CudaStream) -> Result<(), weft_host::Error> {
/// let mut batch = weft_host::Batch::new();
/// batch.send(comm, a, 1, s)?;
/// batch.recv(comm, b, 1, s)?;
/// batch.launch()?;
/// # Ok(()) }
/// ```
///
/// Arguments are checked when the batch launches, inside the group: the first error ends the group (NCCL then
/// launches what was issued before it) and is returned.
pub struct Batch<'b> {
    operations: Vec<Deferred<'b>>,
    /// The non-blocking communicators used, whose enqueues may still be in progress after `ncclGroupEnd`.
    pending: Vec<(&'static Library, ncclComm_t)>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch").field("operations", &self.operations.len()).finish()
    }
}

impl Default for Batch<'_> {
    fn default() -> Self {
        Batch::new()
    }
}

impl<'b> Batch<'b> {
    /// An empty batch.
    pub fn new() -> Batch<'b> {
        Batch { operations: Vec::new(), pending: Vec::new() }
    }

    /// The number of operations added.
    pub fn len(&self) -> usize {
        self.operations.len()
    }

    /// Whether no operation was added.
    pub fn is_empty(&self) -> bool {
        self.operations.is_empty()
    }

    fn add<M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        call: &'static str,
        stream: &CudaStream,
        operation: Deferred<'b>,
    ) -> Result<&mut Self, Error> {
        crate::graph::refuse_foreign_capture(call, stream)?;
        if !M::BLOCKING && !self.pending.iter().any(|&(_, raw)| raw == comm.raw()) {
            self.pending.push((comm.library(), comm.raw()));
        }
        self.operations.push(operation);
        Ok(self)
    }

    /// Adds `ncclSend` of `send` to `peer` ([`Communicator::send`]).
    pub fn send<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        peer: usize,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::send", stream, Box::new(move || comm.send_enqueue(send, peer, stream)))
    }

    /// Adds `ncclRecv` into `recv` from `peer` ([`Communicator::recv`]).
    pub fn recv<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        recv: &'b mut impl NcclBufferMut<T>,
        peer: usize,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::recv", stream, Box::new(move || comm.recv_enqueue(recv, peer, stream)))
    }

    /// Adds one `ncclRecv` per `(peer, range)` of `parts`, each into elements `range` of `recv`: the receiving half
    /// of an all-to-all with varying counts, where each peer's part lands in its own range of one buffer (cudarc
    /// cannot hold several mutable views of one allocation at once). The ranges must lie inside `recv` and not
    /// overlap (two receives into one element would race); empty ranges are skipped.
    pub fn recv_parts<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        recv: &'b mut impl NcclBufferMut<T>,
        parts: impl IntoIterator<Item = (usize, Range<usize>)>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        let parts = checked_parts(parts, recv.buffer_len())?;
        self.add(comm, "Batch::recv_parts", stream, Box::new(move || comm.recv_parts_enqueue(recv, &parts, stream)))
    }

    /// Adds `ncclAllReduce` ([`Communicator::all_reduce`]).
    pub fn all_reduce<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        recv: &'b mut impl NcclBufferMut<T>,
        op: ReduceOp<'b>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::all_reduce", stream, Box::new(move || comm.all_reduce_enqueue(send, recv, op, stream)))
    }

    /// Adds an in-place `ncclAllReduce` ([`Communicator::all_reduce_in_place`]).
    pub fn all_reduce_in_place<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        buffer: &'b mut impl NcclBufferMut<T>,
        op: ReduceOp<'b>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        let call = "Batch::all_reduce_in_place";
        self.add(comm, call, stream, Box::new(move || comm.all_reduce_in_place_enqueue(buffer, op, stream)))
    }

    /// Adds `ncclBroadcast` ([`Communicator::broadcast`]).
    pub fn broadcast<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        recv: &'b mut impl NcclBufferMut<T>,
        root: usize,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::broadcast", stream, Box::new(move || comm.broadcast_enqueue(send, recv, root, stream)))
    }

    /// Adds `ncclAllGather` ([`Communicator::all_gather`]).
    pub fn all_gather<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        recv: &'b mut impl NcclBufferMut<T>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::all_gather", stream, Box::new(move || comm.all_gather_enqueue(send, recv, stream)))
    }

    /// Adds `ncclReduceScatter` ([`Communicator::reduce_scatter`]).
    pub fn reduce_scatter<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        recv: &'b mut impl NcclBufferMut<T>,
        op: ReduceOp<'b>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        let call = "Batch::reduce_scatter";
        self.add(comm, call, stream, Box::new(move || comm.reduce_scatter_enqueue(send, recv, op, stream)))
    }

    /// Adds `ncclAlltoAll` ([`Communicator::all_to_all`]).
    pub fn all_to_all<T: Element, M: Mode>(
        &mut self,
        comm: &'b Communicator<Active, M>,
        send: &'b impl NcclBuffer<T>,
        recv: &'b mut impl NcclBufferMut<T>,
        stream: &'b CudaStream,
    ) -> Result<&mut Self, Error> {
        self.add(comm, "Batch::all_to_all", stream, Box::new(move || comm.all_to_all_enqueue(send, recv, stream)))
    }

    /// Issues every operation inside one NCCL group and ends it, so NCCL enqueues them all; then records each
    /// buffer's use on its stream. Refused inside a group that is already open on this thread (only the outermost
    /// end launches anything, after this call would have released the buffers).
    pub fn launch(self) -> Result<(), Error> {
        if crate::group::in_group() {
            return Err(Error::invalid(
                "self",
                "Batch::launch inside an open NCCL group: NCCL would enqueue the batch only at the outer group's end, \
                 after the batch released its buffers; launch it outside the group",
            ));
        }
        let Batch { operations, pending } = self;
        if operations.is_empty() {
            return Ok(());
        }
        let group = crate::group::Group::start()?;
        let mut issued = Vec::with_capacity(operations.len());
        let mut failure = None;
        for operation in operations {
            match operation() {
                Ok(enqueued) => issued.push(enqueued),
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        // Ending the group enqueues what was issued, on error too: the guards in `issued` are dropped only after.
        let ended = group.end();
        let settled = match &ended {
            Ok(true) => settle(&pending),
            _ => Ok(()),
        };
        drop(issued);
        if let Some(error) = failure {
            return Err(error);
        }
        ended?;
        settled
    }
}

/// Waits until NCCL reports the group's enqueue done on every non-blocking communicator of the batch.
fn settle(pending: &[(&'static Library, ncclComm_t)]) -> Result<(), Error> {
    for &(library, comm) in pending {
        loop {
            // SAFETY: the communicator is borrowed by the batch's operations, which live until after this returns.
            let progress = unsafe { result::comm_get_async_error(library, comm) }?;
            if progress != Progress::InProgress {
                break;
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// `parts` with each range inside `len` elements and none overlapping another; empty ranges dropped.
pub(crate) fn checked_parts(
    parts: impl IntoIterator<Item = (usize, Range<usize>)>,
    len: usize,
) -> Result<Vec<(usize, Range<usize>)>, Error> {
    let mut parts: Vec<(usize, Range<usize>)> = parts.into_iter().filter(|(_, range)| !range.is_empty()).collect();
    for (peer, range) in &parts {
        if range.start > range.end || range.end > len {
            return Err(Error::invalid(
                "parts",
                format!("the range {range:?} for peer {peer} is not inside a buffer of {len} elements"),
            ));
        }
    }
    let mut sorted: Vec<&Range<usize>> = parts.iter().map(|(_, range)| range).collect();
    sorted.sort_by_key(|range| range.start);
    if let Some(pair) = sorted.windows(2).find(|pair| pair[0].end > pair[1].start) {
        return Err(Error::invalid(
            "parts",
            format!("the ranges {:?} and {:?} overlap: two receives would write the same elements", pair[0], pair[1]),
        ));
    }
    parts.shrink_to_fit();
    Ok(parts)
}

impl<M: Mode> Communicator<Active, M> {
    /// One `ncclRecv` per part, into `recv` at each part's range (checked by [`checked_parts`]).
    fn recv_parts_enqueue<'a, T: Element>(
        &'a self,
        recv: &'a mut (impl BufferMut<T> + ?Sized),
        parts: &[(usize, Range<usize>)],
        stream: &'a CudaStream,
    ) -> Result<Enqueued<'a>, Error> {
        let raw_stream = self.check_stream(stream)?;
        self.check_buffer("recv", recv)?;
        let len = recv.buffer_len();
        let peers = parts.iter().map(|(peer, _)| self.check_rank_arg("parts", *peer)).collect::<Result<Vec<_>, _>>()?;
        let (base, write) = recv.write_address(stream, None)?;
        for ((_, range), peer) in parts.iter().zip(peers) {
            // Checked when the part was added; the buffer's length cannot have changed since (it is borrowed).
            debug_assert!(range.end <= len);
            let count = range.len();
            let address = base + (range.start * std::mem::size_of::<T>()) as u64;
            self.line_up_launch(super::launch!("ncclRecv"))?;
            // SAFETY: `range` lies inside `recv` (checked against its length when added), so NCCL writes at most
            // `count` elements inside it; the buffer is borrowed until `write` records the use after the group.
            let progress = unsafe {
                result::recv(self.library(), address as _, count, T::DATATYPE, peer, self.raw(), raw_stream)
            }?;
            self.enqueued(progress)?;
        }
        Ok(Enqueued::new(Some(write), None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_must_lie_inside_the_buffer_and_apart() {
        let parts = checked_parts([(0, 0..4), (1, 4..4), (2, 4..10)], 10).unwrap();
        assert_eq!(parts, vec![(0, 0..4), (2, 4..10)], "empty parts are dropped, the others kept in order");
        let text = checked_parts([(0, 0..4), (1, 8..11)], 10).unwrap_err().to_string();
        assert!(text.contains("8..11") && text.contains("not inside a buffer of 10"), "{text}");
        let text = checked_parts([(1, 5..9), (0, 0..6)], 10).unwrap_err().to_string();
        assert!(text.contains("overlap"), "{text}");
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = checked_parts([(0, 6..2)], 10).unwrap();
        assert!(reversed.is_empty(), "a reversed range is empty: nothing is received");
    }
}
