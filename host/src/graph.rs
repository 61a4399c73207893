//! CUDA graphs of weft kernels and NCCL collectives: capture once, replay many times.
//!
//! A replay runs the captured kernels on the device addresses, device communicators and windows they were captured
//! with. So everything a capture records is borrowed for the graph's whole life, `'g`: the borrow checker refuses
//! a graph that outlives a buffer, window, device communicator or communicator it replays, and the graph's drop
//! waits for its last replay before those borrows end. How it is kept sound:
//!
//! - A capture runs on a private stream that only [`Capture`] can reach, so nothing but its `'g`-typed recorders
//!   (the `record` function `#[weft::kernel]` generates, and [`Capture::all_reduce`] and friends) can add work
//!   to the graph. The caller's stream never captures.
//! - Recording never records or waits on an event of the buffers (an event recorded during a capture cannot be
//!   waited for afterwards); the graph records its own replays instead, and [`Graph::settle`], [`Graph::read`],
//!   [`Graph::write`] and the drop wait for the last one (polling: no driver lock held, as
//!   [`crate::cuda::settle`]).
//! - Buffers are borrowed shared (`&'g`), outputs too: between replays the host reads and writes them through
//!   [`Graph::read`] and [`Graph::write`], which order themselves after the replays. (A `&'g mut` output would
//!   forbid exactly that for the graph's whole life.)
//! - Only weft's own memory is recorded ([`DeviceBuffer`], [`Window`](crate::Window) through kernels): cudarc's
//!   `CudaSlice` tracks its uses with events, which a capture cannot wait for.
//!
//! The capture mode is `CU_STREAM_CAPTURE_MODE_RELAXED`: a kernel's first launch may compile and load it in the
//! middle of a capture, which the stricter modes forbid. On a GPU shared by several ranks, load every kernel before
//! capturing, as before launching (docs/multi-rank.md, "Load before launch"). docs/graphs.md has the whole story.

use std::marker::PhantomData;
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode, CUstreamCaptureStatus};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream, DeviceSlice, SyncOnDrop};

use crate::comm::{Active, Blocking, Communicator};
use crate::datatype::{Element, ReduceOp};
use crate::error::Error;
use crate::resources::uses::Access;
use crate::resources::DeviceBuffer;

/// Work recorded for a [`Graph`]; everything it records is borrowed for `'g`. Made by [`Graph::capture`].
pub struct Capture<'g> {
    /// The private capturing stream (never handed out outside weft-host: anything enqueued on it is replayed).
    stream: Arc<CudaStream>,
    /// The stream replays will run on (what recorded resources note as their user).
    replay: Arc<CudaStream>,
    /// How many operations were recorded, and the ranks sharing the GPU with the recorded communicators.
    log: CaptureLog,
    /// Invariant in `'g`: a recorder's `&'g` borrows cannot be shortened to fit.
    borrows: PhantomData<fn(&'g ()) -> &'g ()>,
}

impl std::fmt::Debug for Capture<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("recorded", &self.log.recorded.get()).finish()
    }
}

/// What a capture learns from what it records.
#[derive(Default)]
pub(crate) struct CaptureLog {
    /// How many operations were recorded.
    recorded: std::cell::Cell<usize>,
    /// The group of ranks of this process sharing the GPU with a recorded communicator (its `LocalGroup`), if any.
    group: std::cell::RefCell<Option<Arc<crate::placement::LocalGroup>>>,
    /// The graph's identity for the buffers it claims (`resources::uses`): alive while the capture, then the graph,
    /// is.
    token: Arc<()>,
    /// One per communicator recorded: a replay refuses once one released its resources (`close_all_resources`).
    closes: std::cell::RefCell<Vec<crate::resources::CloseWatch>>,
    /// The kernels recorded: each holds its module loaded, which `KernelRegistry::clear` would otherwise unload
    /// under the graph.
    functions: std::cell::RefCell<Vec<cudarc::driver::CudaFunction>>,
}

impl CaptureLog {
    /// Counts one recorded collective of `comm`.
    pub(crate) fn note<M: crate::comm::Mode>(&self, comm: &Communicator<Active, M>) {
        self.note_plain();
        self.join_group_of(comm);
        self.watch(comm.close_watch());
    }

    /// Notes that what is recorded uses resources of the communicator `watch` watches.
    pub(crate) fn watch(&self, watch: crate::resources::CloseWatch) {
        let mut closes = self.closes.borrow_mut();
        if !closes.iter().any(|known| known.same_registry(&watch)) {
            closes.push(watch);
        }
    }

    /// Notes that what is recorded runs `comm`'s work (a kernel taking its device communicator).
    pub(crate) fn join_group_of<S: crate::comm::State, M: crate::comm::Mode>(&self, comm: &Communicator<S, M>) {
        if let Some(group) = comm.local_group() {
            self.group.borrow_mut().get_or_insert_with(|| group.clone());
        }
    }

    /// The identity of the graph being captured, for the buffers it claims.
    pub(crate) fn token(&self) -> &Arc<()> {
        &self.token
    }

    /// Keeps the module of a recorded kernel loaded for the graph's life.
    pub(crate) fn keep_function(&self, function: &cudarc::driver::CudaFunction) {
        self.functions.borrow_mut().push(function.clone());
    }

    /// Counts one recorded operation.
    pub(crate) fn note_plain(&self) {
        self.recorded.set(self.recorded.get() + 1);
    }
}

/// A captured, instantiated CUDA graph of weft kernels and NCCL collectives, replayed on the stream it was captured
/// for. It borrows everything it replays for `'g`.
pub struct Graph<'g> {
    graph: CudaGraph,
    /// Where replays run: the stream given to [`Graph::capture`].
    stream: Arc<CudaStream>,
    /// Recorded after each replay (what `settle`, `read`, `write` and the drop wait for).
    replayed: CudaEvent,
    replays: u64,
    recorded: usize,
    /// The recorded communicators' resource registries, checked before each replay.
    closes: Vec<crate::resources::CloseWatch>,
    /// The recorded kernels, whose modules stay loaded until the executable graph (dropped first) is gone.
    _functions: Vec<cudarc::driver::CudaFunction>,
    /// Keeps the claims on the recorded buffers alive (`resources::uses`); dropped after the last replay settled.
    _claims: Arc<()>,
    borrows: PhantomData<fn(&'g ()) -> &'g ()>,
}

impl std::fmt::Debug for Graph<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph").field("recorded", &self.recorded).field("replays", &self.replays).finish()
    }
}

/// A buffer a capture records: weft's [`DeviceBuffer`] (its address and length are weft's own, and it tracks its
/// uses without events a capture could not wait for).
///
/// Sealed.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be recorded into a CUDA graph as a buffer of `{T}`",
    label = "a graph records weft memory",
    note = "allocate it with `DeviceBuffer::new` (cudarc's `CudaSlice` tracks its uses with events, which a capture \
            cannot wait for)"
)]
pub trait GraphBuffer<T>: sealed::GraphBuffer<T> {}

pub(crate) mod sealed {
    use super::*;

    pub trait GraphBuffer<T> {
        fn graph_address(&self) -> u64;
        fn graph_len(&self) -> usize;
        fn graph_stream(&self) -> &Arc<CudaStream>;
        /// Claims the buffer for the replays on `replay` of the graph alive while `graph` is: `replay` waits for
        /// the conflicting uses on other streams now, uses on other streams that conflict are refused while the
        /// graph lives, and the buffer's drop waits for `replay` (`resources::uses`).
        fn graph_claim(&self, graph: &Arc<()>, replay: &Arc<CudaStream>, write: bool) -> Result<(), Error>;
    }
}

impl<T: cudarc::driver::DeviceRepr> sealed::GraphBuffer<T> for DeviceBuffer<T> {
    fn graph_address(&self) -> u64 {
        self.device_address()
    }
    fn graph_len(&self) -> usize {
        self.len()
    }
    fn graph_stream(&self) -> &Arc<CudaStream> {
        DeviceSlice::stream(self)
    }
    fn graph_claim(&self, graph: &Arc<()>, replay: &Arc<CudaStream>, write: bool) -> Result<(), Error> {
        self.claim_for_graph(graph, replay, if write { Access::Write } else { Access::Read })
    }
}

impl<T: cudarc::driver::DeviceRepr> GraphBuffer<T> for DeviceBuffer<T> {}

/// A recorded buffer as the collectives see it: its address, with no event recorded or waited for (the graph
/// orders its replays itself, and the capture noted the replay stream on the buffer).
struct Recorded<'g, T> {
    ptr: u64,
    len: usize,
    stream: &'g Arc<CudaStream>,
    element: PhantomData<T>,
}

impl<'g, T> Recorded<'g, T> {
    fn of(buffer: &'g (impl sealed::GraphBuffer<T> + ?Sized)) -> Recorded<'g, T> {
        Recorded {
            ptr: buffer.graph_address(),
            len: buffer.graph_len(),
            stream: buffer.graph_stream(),
            element: PhantomData,
        }
    }
}

impl<T> crate::launch::buffers::sealed::Buffer<T> for Recorded<'_, T> {
    fn buffer_len(&self) -> usize {
        self.len
    }
    fn buffer_stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
    fn read_address<'a>(
        &'a self,
        _stream: &'a CudaStream,
        _held: Option<&Arc<CudaStream>>,
    ) -> Result<(u64, SyncOnDrop<'a>), Error> {
        Ok((self.ptr, SyncOnDrop::Record(None)))
    }
}

impl<T> crate::launch::buffers::sealed::BufferMut<T> for Recorded<'_, T> {
    fn write_address<'a>(
        &'a mut self,
        _stream: &'a CudaStream,
        _held: Option<&Arc<CudaStream>>,
    ) -> Result<(u64, SyncOnDrop<'a>), Error> {
        Ok((self.ptr, SyncOnDrop::Record(None)))
    }
}

/// Refuses to enqueue `call` on a stream that is capturing into a CUDA graph weft did not start (cudarc's
/// `CudaStream::begin_capture` is safe): that graph could be replayed after the buffers, windows or device
/// communicators of the call are gone, since nothing borrows them for its life. [`Graph::capture`] records with
/// such borrows, on a private stream that never reaches this check.
pub(crate) fn refuse_foreign_capture(call: &'static str, stream: &CudaStream) -> Result<(), Error> {
    if stream.cu_stream().is_null() {
        // The legacy default stream is the current context's.
        stream.context().bind_to_thread()?;
    }
    // SAFETY: a live stream handle (borrowed), and for the null handle its context is current.
    let status = unsafe { cudarc::driver::result::stream::is_capturing(stream.cu_stream()) }?;
    if status == CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Ok(());
    }
    Err(Error::invalid(
        "stream",
        format!(
            "{call} on a stream that is capturing a CUDA graph ({status:?}) weft did not start: that graph could \
             replay it after its buffers are freed; record it with `weft_host::Graph::capture`, which borrows them \
             for the graph's life"
        ),
    ))
}

/// Ends a capture that a recorder's error or a panic left open, dropping what it captured.
struct OpenCapture<'s>(Option<&'s CudaStream>);

impl OpenCapture<'_> {
    fn close(mut self) {
        self.0 = None;
    }
}

impl Drop for OpenCapture<'_> {
    fn drop(&mut self) {
        if let Some(stream) = self.0 {
            let _ = stream.context().bind_to_thread();
            // SAFETY: the stream is capturing (begun by `Graph::capture` on this thread); the graph it returns is
            // destroyed at once and never instantiated.
            unsafe {
                if let Ok(graph) = cudarc::driver::result::stream::end_capture(stream.cu_stream()) {
                    if !graph.is_null() {
                        let _ = cudarc::driver::result::graph::destroy(graph);
                    }
                }
            }
        }
    }
}

impl<'g> Graph<'g> {
    /// Records what `body` enqueues through the [`Capture`] into a graph that replays on `stream`.
    ///
    /// Nothing runs while capturing: NCCL and the kernels run at [`replay`](Graph::replay). The capture happens on
    /// a private stream of `stream`'s context; `stream` itself is untouched until the first replay. An error of
    /// `body` ends the capture and is returned; so is a capture the driver invalidated
    /// (`Error::InvalidArgument { argument: "graph" }`), and one that recorded nothing.
    pub fn capture(
        stream: &Arc<CudaStream>,
        body: impl FnOnce(&mut Capture<'g>) -> Result<(), Error>,
    ) -> Result<Graph<'g>, Error> {
        let context = stream.context();
        let private = context.new_stream()?;
        let replayed = context.new_event(None)?;
        private.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
        let open = OpenCapture(Some(&private));
        let mut capture = Capture {
            stream: private.clone(),
            replay: stream.clone(),
            log: CaptureLog::default(),
            borrows: PhantomData,
        };
        body(&mut capture)?;
        let status = private.capture_status()?;
        open.close();
        let graph = private.end_capture(CUgraphInstantiate_flags(0));
        if status != CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_ACTIVE {
            return Err(Error::invalid(
                "graph",
                format!(
                    "the driver invalidated the capture ({status:?}): something outside the capture joined or \
                     synchronized its stream"
                ),
            ));
        }
        let graph = graph?.ok_or_else(|| Error::invalid("graph", "the capture recorded nothing"))?;
        let recorded = capture.log.recorded.get();
        if recorded == 0 {
            return Err(Error::invalid("graph", "the capture recorded nothing: record a kernel or a collective"));
        }
        // Ranks of this process that share the GPU line up here, so that none replays before every one has
        // instantiated its graph: the driver's instantiation can wait for work already running on the device, and a
        // peer's replayed kernel waits for this rank's (docs/graphs.md: seen at 8 ranks on one GPU).
        if let Some(group) = capture.log.group.take() {
            group.line_up("CUDA graph instantiation", crate::placement::LINE_UP_TIMEOUT)?;
        }
        let (closes, _functions) = (capture.log.closes.take(), capture.log.functions.take());
        Ok(Graph {
            graph,
            stream: stream.clone(),
            replayed,
            replays: 0,
            recorded,
            closes,
            _functions,
            _claims: capture.log.token.clone(),
            borrows: PhantomData,
        })
    }

    /// Enqueues one replay of the whole graph on its stream (asynchronous, like a launch). Refused once
    /// `close_all_resources` released resources of a communicator the graph was recorded on.
    pub fn replay(&mut self) -> Result<(), Error> {
        for watch in &self.closes {
            watch.check()?;
        }
        self.stream.context().bind_to_thread()?;
        // SAFETY: the executable graph is live (owned by `self.graph`); everything it touches is borrowed for
        // `'g`, which `self` does not outlive, and the drop waits for this replay before those borrows end.
        unsafe { cudarc::driver::result::graph::launch(self.graph.cu_graph_exec(), self.stream.cu_stream()) }?;
        self.replayed.record(&self.stream)?;
        self.replays += 1;
        Ok(())
    }

    /// Uploads the graph to the device ahead of its first replay (which otherwise pays for it).
    pub fn upload(&self) -> Result<(), Error> {
        self.stream.context().bind_to_thread()?;
        // SAFETY: a live executable graph and a live stream of its context.
        unsafe { cudarc::driver::result::graph::upload(self.graph.cu_graph_exec(), self.stream.cu_stream()) }?;
        Ok(())
    }

    /// Waits until every replay enqueued so far has finished, polling (see [`crate::cuda::settle`];
    /// [`Error::Stalled`] after [`crate::cuda::SETTLE_TIMEOUT`]).
    pub fn settle(&self) -> Result<(), Error> {
        crate::cuda::settle_event(&self.replayed, crate::cuda::SETTLE_TIMEOUT)
    }

    /// `buffer`'s contents once every replay so far has finished (a buffer the graph writes, typically).
    pub fn read<T: cudarc::driver::DeviceRepr + Default + Clone>(
        &self,
        buffer: &DeviceBuffer<T>,
    ) -> Result<Vec<T>, Error> {
        self.settle()?;
        buffer.copy_to_host()
    }

    /// Overwrites `buffer` with `host` once every replay so far has finished (an input of the next replay,
    /// typically). Takes `buffer` shared: the graph itself holds shared borrows of what it records.
    pub fn write<T: cudarc::driver::DeviceRepr>(&self, buffer: &DeviceBuffer<T>, host: &[T]) -> Result<(), Error> {
        self.settle()?;
        buffer.overwrite_from_host(host)
    }

    /// How many operations (kernels, collectives) the capture recorded.
    pub fn recorded(&self) -> usize {
        self.recorded
    }

    /// How many replays were enqueued.
    pub fn replays(&self) -> u64 {
        self.replays
    }

    /// The stream replays run on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl Drop for Graph<'_> {
    fn drop(&mut self) {
        // The borrowed resources may be freed once this returns. Each one also waits for the replay stream when
        // it is freed (the capture noted the replays as its users), and leaks itself if that wait fails; waiting
        // here first reports a stalled replay where it belongs.
        if self.replays > 0 {
            if let Err(error) = self.settle() {
                tracing::error!(%error, "waiting for the last replay of a CUDA graph failed");
            }
        }
    }
}

impl<'g> Capture<'g> {
    /// The private capturing stream: weft-host's own (anything enqueued on it is replayed).
    pub(crate) fn capturing_stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The stream replays run on.
    pub(crate) fn replay_stream(&self) -> &Arc<CudaStream> {
        &self.replay
    }

    pub(crate) fn log(&self) -> &CaptureLog {
        &self.log
    }

    /// Records the collective `enqueue` makes on the capturing stream, then notes its buffers (and a device-scalar
    /// op) as used by the replays and counts it.
    fn collective<'a, T>(
        &'a self,
        comm: &Communicator<Active, Blocking>,
        buffers: &[(&dyn sealed::GraphBuffer<T>, Access)],
        op: Option<ReduceOp<'_>>,
        enqueue: impl FnOnce(&'a CudaStream) -> Result<crate::collectives::Enqueued<'a>, Error>,
    ) -> Result<(), Error> {
        for (buffer, access) in buffers {
            buffer.graph_claim(self.log.token(), &self.replay, *access == Access::Write)?;
        }
        // Nothing to record on the capturing stream after the enqueue: the replays were claimed instead.
        enqueue(&self.stream)?.recorded();
        if let Some(ReduceOp::Custom(custom)) = op {
            custom.note_replays(&self.replay);
        }
        self.log.note(comm);
        Ok(())
    }

    /// Records a launch of a kernel weft did not generate (a hand-written baseline), like
    /// [`crate::launch::launch_raw`] but into the graph.
    ///
    /// # Safety
    /// [`crate::launch::launch_raw`]'s contract, with "until the kernel has finished" read as "until the graph is
    /// dropped": every address in `args` stays valid for every replay. And `args` holds plain addresses (from
    /// `DeviceBuffer::device_address` or a window's), not cudarc guards: an event recorded during a capture cannot
    /// be waited for afterwards.
    pub unsafe fn launch_raw(
        &mut self,
        function: &cudarc::driver::CudaFunction,
        cfg: &crate::LaunchConfig,
        args: &mut crate::launch::ArgBuffer<'_>,
    ) -> Result<(), Error> {
        // SAFETY: the caller's contract above; the capturing stream is of the function's context (checked by the
        // driver: a function of another context fails the launch).
        unsafe { crate::launch::launch_raw(function, &self.stream, cfg, args) }?;
        self.log.keep_function(function);
        self.log.note_plain();
        Ok(())
    }

    /// Records `ncclAllReduce` of `send` into `recv` (equal lengths) on `comm`.
    pub fn all_reduce<T: Element>(
        &mut self,
        comm: &'g Communicator<Active, Blocking>,
        send: &'g impl GraphBuffer<T>,
        recv: &'g impl GraphBuffer<T>,
        op: ReduceOp<'g>,
    ) -> Result<(), Error> {
        let (send_arg, mut recv_arg) = (Recorded::of(send), Recorded::of(recv));
        self.collective(comm, &[(send, Access::Read), (recv, Access::Write)], Some(op), |stream| {
            comm.all_reduce_enqueue(&send_arg, &mut recv_arg, op, stream)
        })
    }

    /// Records an in-place `ncclAllReduce` of `buffer` on `comm`.
    pub fn all_reduce_in_place<T: Element>(
        &mut self,
        comm: &'g Communicator<Active, Blocking>,
        buffer: &'g impl GraphBuffer<T>,
        op: ReduceOp<'g>,
    ) -> Result<(), Error> {
        let mut arg = Recorded::of(buffer);
        self.collective(comm, &[(buffer, Access::Write)], Some(op), |stream| {
            comm.all_reduce_in_place_enqueue(&mut arg, op, stream)
        })
    }

    /// Records `ncclReduceScatter` (`send.len() == recv.len() * nranks`) on `comm`.
    pub fn reduce_scatter<T: Element>(
        &mut self,
        comm: &'g Communicator<Active, Blocking>,
        send: &'g impl GraphBuffer<T>,
        recv: &'g impl GraphBuffer<T>,
        op: ReduceOp<'g>,
    ) -> Result<(), Error> {
        let (send_arg, mut recv_arg) = (Recorded::of(send), Recorded::of(recv));
        self.collective(comm, &[(send, Access::Read), (recv, Access::Write)], Some(op), |stream| {
            comm.reduce_scatter_enqueue(&send_arg, &mut recv_arg, op, stream)
        })
    }

    /// Records `ncclAllGather` (`recv.len() == send.len() * nranks`) on `comm`.
    pub fn all_gather<T: Element>(
        &mut self,
        comm: &'g Communicator<Active, Blocking>,
        send: &'g impl GraphBuffer<T>,
        recv: &'g impl GraphBuffer<T>,
    ) -> Result<(), Error> {
        let (send_arg, mut recv_arg) = (Recorded::of(send), Recorded::of(recv));
        self.collective(comm, &[(send, Access::Read), (recv, Access::Write)], None, |stream| {
            comm.all_gather_enqueue(&send_arg, &mut recv_arg, stream)
        })
    }
}
