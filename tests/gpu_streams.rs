//! GPU tests of the guards on device memory that kernels reach (docs/soundness.md), one rank: a buffer used
//! on several streams is freed only after every stream's use, a use on one stream waits for the writes (a write for
//! every use) on the others, host copies wait for writes on any stream; a launch or a recording whose output is also
//! one of its inputs is refused, and so are uses that would race with a live CUDA graph's replays on another stream;
//! an LL all-to-all handle works with its own device communicator only. The views of registered memory (a window's
//! or registration's `view()` / `buffer_mut()`) are tracked on the owner's buffer: ordered, claimed and waited for
//! like it.
//!
//! Each test makes a stream busy with the spin kernel first, so that work enqueued behind it is still pending when
//! the host goes on: without the guard, the free, the other stream's kernel or the host copy would not wait for it.

use weft_kit::spin::{spin, SPIN};
use weft_kit::test_kernels::{add_into_window, copy_f32, fill_f32, fill_window, ll_a2a_round};

use std::sync::Arc;
use std::time::Duration;

use cudarc::driver::{CudaFunction, CudaStream};
use weft::host::caps::Lsa;
use weft::host::{
    Communicator, Config, DevComm, DeviceBuffer, Error, Graph, LaunchConfig, ReduceOp, Requirements, UniqueId,
    WindowFlags,
};

const N: usize = 1 << 20;
/// Long enough for the host to go on while the stream is still busy.
const BUSY_NS: u64 = 300_000_000;
const DEADLINE: Duration = Duration::from_secs(30);

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

fn streams<const K: usize>(comm: &Communicator) -> [Arc<CudaStream>; K] {
    std::array::from_fn(|_| comm.context().new_stream().unwrap())
}

fn spinner(comm: &Communicator) -> CudaFunction {
    weft::host::jit::function(comm.context(), &SPIN).unwrap()
}

fn cfg() -> LaunchConfig {
    LaunchConfig::linear(132, 256)
}

fn settle(stream: &CudaStream) {
    weft::host::cuda::settle_within(stream, DEADLINE).unwrap();
}

fn refused(result: Result<(), Error>, needle: &str) {
    match result {
        Err(Error::InvalidArgument { problem, .. }) if problem.contains(needle) => println!("refused: {problem}"),
        other => panic!("expected a refusal naming `{needle}`, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_buffer_used_on_several_streams_is_freed_after_the_last_use_on_each() {
    let comm = one_rank();
    let [own, slow, quick] = streams::<3>(&comm);
    let busy = spinner(&comm);
    let source = DeviceBuffer::from_host(&own, &vec![3.0f32; N]).unwrap();
    let mut slow_copy = slow.alloc_zeros::<f32>(N).unwrap();
    let mut quick_copy = quick.alloc_zeros::<f32>(N).unwrap();
    // A kernel on `slow` reads the buffer once the spinner is done; one on `quick` reads it at once, last.
    spin(&busy, &slow, BUSY_NS).unwrap();
    copy_f32::launch(&slow, cfg(), &source, &mut slow_copy, N).unwrap();
    copy_f32::launch(&quick, cfg(), &source, &mut quick_copy, N).unwrap();
    // Before: the drop waited for the last use's stream (`quick`) and the buffer's own, and freed the memory under
    // the kernel still queued on `slow`: that kernel then read unmapped memory (an illegal address) or whatever
    // the next allocation wrote there.
    drop(source);
    let reuse: Vec<_> = (0..4).map(|_| DeviceBuffer::from_host(&own, &vec![-1.0f32; N]).unwrap()).collect();
    settle(&slow);
    settle(&quick);
    drop(reuse);
    assert!(weft::host::cuda::download(&slow, &slow_copy).unwrap().iter().all(|&v| v == 3.0), "the slow copy");
    assert!(weft::host::cuda::download(&quick, &quick_copy).unwrap().iter().all(|&v| v == 3.0), "the quick copy");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_read_on_one_stream_waits_for_a_write_on_another() {
    let comm = one_rank();
    let [writer, reader] = streams::<2>(&comm);
    let busy = spinner(&comm);
    let mut buffer = DeviceBuffer::from_host(&writer, &vec![0.0f32; N]).unwrap();
    let mut out = reader.alloc_zeros::<f32>(N).unwrap();
    spin(&busy, &writer, BUSY_NS).unwrap();
    fill_f32::launch(&writer, cfg(), &mut buffer, 5.0, N).unwrap();
    // Before: nothing ordered the reader after the writer, so the copy read the zeros.
    copy_f32::launch(&reader, cfg(), &buffer, &mut out, N).unwrap();
    settle(&reader);
    assert!(weft::host::cuda::download(&reader, &out).unwrap().iter().all(|&v| v == 5.0), "the copy saw the write");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_write_on_one_stream_waits_for_a_read_on_another() {
    let comm = one_rank();
    let [own, reader] = streams::<2>(&comm);
    let busy = spinner(&comm);
    let mut buffer = DeviceBuffer::from_host(&own, &vec![1.0f32; N]).unwrap();
    let mut out = reader.alloc_zeros::<f32>(N).unwrap();
    spin(&busy, &reader, BUSY_NS).unwrap();
    copy_f32::launch(&reader, cfg(), &buffer, &mut out, N).unwrap();
    // Before: the write ran at once, and the queued read saw 9.
    fill_f32::launch(&own, cfg(), &mut buffer, 9.0, N).unwrap();
    settle(&own);
    settle(&reader);
    assert!(weft::host::cuda::download(&reader, &out).unwrap().iter().all(|&v| v == 1.0), "the read came first");
    assert!(buffer.copy_to_host().unwrap().iter().all(|&v| v == 9.0), "then the write");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_host_copy_waits_for_writes_on_every_stream() {
    let comm = one_rank();
    let [own, writer] = streams::<2>(&comm);
    let busy = spinner(&comm);
    let mut buffer = DeviceBuffer::from_host(&own, &vec![0.0f32; N]).unwrap();
    spin(&busy, &writer, BUSY_NS).unwrap();
    fill_f32::launch(&writer, cfg(), &mut buffer, 7.0, N).unwrap();
    // Before: the copy waited for the buffer's own stream only, and read the zeros.
    assert!(buffer.copy_to_host().unwrap().iter().all(|&v| v == 7.0), "the host saw the other stream's write");
    // And a host write waits for a pending read on another stream.
    let mut out = writer.alloc_zeros::<f32>(N).unwrap();
    spin(&busy, &writer, BUSY_NS).unwrap();
    copy_f32::launch(&writer, cfg(), &buffer, &mut out, N).unwrap();
    buffer.copy_from_host(&vec![2.0f32; N]).unwrap();
    settle(&writer);
    assert!(weft::host::cuda::download(&writer, &out).unwrap().iter().all(|&v| v == 7.0), "the read came first");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_window_and_its_own_buffer_are_not_one_launch_s_input_and_output() {
    let comm = one_rank();
    let [s] = streams::<1>(&comm);
    let mut window = comm.alloc_window::<f32>(&s, N, WindowFlags::COLL_SYMMETRIC).unwrap();
    window.buffer_mut().copy_from_host(&vec![1.0f32; N]).unwrap();
    // The kernel writes the window while it reads `y`: the same memory, through two shared borrows.
    refused(add_into_window::launch(&s, cfg(), &window, window.buffer(), N), "same device memory");
    let other = DeviceBuffer::from_host(&s, &vec![2.0f32; N]).unwrap();
    add_into_window::launch(&s, cfg(), &window, &other, N).unwrap();
    assert!(window.buffer().copy_to_host().unwrap().iter().all(|&v| v == 3.0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_recording_whose_output_is_its_input_is_refused() {
    let comm = one_rank();
    let [s] = streams::<1>(&comm);
    let buffer = DeviceBuffer::from_host(&s, &vec![1.0f32; N]).unwrap();
    // Before: the graph recorded the kernel with one buffer as `&[T]` and `&mut [T]`.
    let graph = Graph::capture(&s, |c| copy_f32::record(c, cfg(), &buffer, &buffer, N));
    refused(graph.map(drop), "same device memory");
    let out = DeviceBuffer::new(&s, N).unwrap();
    let mut graph = Graph::capture(&s, |c| copy_f32::record(c, cfg(), &buffer, &out, N)).unwrap();
    graph.replay().unwrap();
    assert!(graph.read(&out).unwrap().iter().all(|&v| v == 1.0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_live_graph_pins_its_outputs_to_its_replay_stream() {
    let comm = one_rank();
    let [replay, other] = streams::<2>(&comm);
    let buffer = DeviceBuffer::from_host(&replay, &vec![0.0f32; N]).unwrap();
    let mut out = other.alloc_zeros::<f32>(N).unwrap();
    let mut first = Graph::capture(&replay, |c| fill_f32::record(c, cfg(), &buffer, 1.0, N)).unwrap();
    // A second graph writing it on another stream: its replays and the first's would race.
    let second = Graph::capture(&other, |c| fill_f32::record(c, cfg(), &buffer, 2.0, N));
    refused(second.map(drop), "live CUDA graph");
    // An eager read on another stream would race with the replays; on the replay stream it follows them.
    first.replay().unwrap();
    refused(copy_f32::launch(&other, cfg(), &buffer, &mut out, N), "live CUDA graph");
    let mut same = replay.alloc_zeros::<f32>(N).unwrap();
    copy_f32::launch(&replay, cfg(), &buffer, &mut same, N).unwrap();
    assert!(weft::host::cuda::download(&replay, &same).unwrap().iter().all(|&v| v == 1.0));
    // Once the graph is gone, the other stream may use it, after the replays.
    drop(first);
    copy_f32::launch(&other, cfg(), &buffer, &mut out, N).unwrap();
    assert!(weft::host::cuda::download(&other, &out).unwrap().iter().all(|&v| v == 1.0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn an_ll_a2a_handle_works_with_its_own_device_communicator_only() {
    let comm = one_rank();
    let [s] = streams::<1>(&comm);
    let cfg = LaunchConfig::linear(1, 32);
    let needs = ll_a2a_round::requirements(&cfg).merge(&Requirements::new().ll_a2a(1, 4));
    let mine: DevComm<'_, Lsa> = comm.dev_comm(&needs).unwrap();
    let theirs: DevComm<'_, Lsa> = comm.dev_comm(&needs).unwrap();
    let none: DevComm<'_, Lsa> = comm.dev_comm(&ll_a2a_round::requirements(&cfg)).unwrap();
    assert!(none.ll_a2a_handle().is_none(), "no LL all-to-all requirement, no handle");
    let handle = mine.ll_a2a_handle().expect("made by ncclLLA2ACreateRequirement");
    assert_eq!(handle.slots(), 4);
    let mut out = DeviceBuffer::from_host(&s, &[0.0f32]).unwrap();
    let other = theirs.ll_a2a_handle().unwrap();
    refused(ll_a2a_round::launch(&s, cfg, &mine, &other, &mut out), "another device communicator");
    ll_a2a_round::launch(&s, cfg, &mine, &handle, &mut out).unwrap();
    assert_eq!(out.copy_to_host().unwrap(), vec![1.0], "the value went through the LL all-to-all buffer");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn views_of_a_window_are_ordered_across_streams_like_its_buffer() {
    let comm = one_rank();
    let [own, writer, reader] = streams::<3>(&comm);
    let busy = spinner(&comm);
    let mut window = comm.alloc_window::<f32>(&own, N, WindowFlags::COLL_SYMMETRIC).unwrap();
    window.buffer_mut().copy_from_host(&vec![0.0f32; N]).unwrap();
    // A kernel on `writer` writes the elements through the writable view once the spinner is done; a collective on
    // `reader` reads them through the read-only view. Without the view's use on the window's buffer, nothing ordered
    // the reader after the writer and the all-reduce (a copy at one rank) read the zeros.
    spin(&busy, &writer, BUSY_NS).unwrap();
    fill_f32::launch(&writer, cfg(), &mut window.buffer_mut(), 5.0, N).unwrap();
    let mut out = reader.alloc_zeros::<f32>(N).unwrap();
    comm.all_reduce(&window.view(), &mut out, ReduceOp::Sum, &reader).unwrap();
    settle(&reader);
    assert!(weft::host::cuda::download(&reader, &out).unwrap().iter().all(|&v| v == 5.0), "the read saw the write");
    // A host copy through the view waits for a write of a sub-view on another stream (not only the window's own).
    spin(&busy, &writer, BUSY_NS).unwrap();
    {
        let mut whole = window.buffer_mut();
        let mut head = whole.slice_mut(..N / 2).unwrap();
        fill_f32::launch(&writer, cfg(), &mut head, 6.0, N / 2).unwrap();
    }
    let seen = window.view().copy_to_host().unwrap();
    assert!(seen[..N / 2].iter().all(|&v| v == 6.0), "the host saw the sub-view's write");
    assert!(seen[N / 2..].iter().all(|&v| v == 5.0), "which wrote only its part");
    // A host write through the view waits for a pending read on another stream.
    spin(&busy, &reader, BUSY_NS).unwrap();
    copy_f32::launch(&reader, cfg(), &window.view(), &mut out, N).unwrap();
    window.buffer_mut().copy_from_host(&vec![1.0f32; N]).unwrap();
    settle(&reader);
    let read = weft::host::cuda::download(&reader, &out).unwrap();
    assert!(read[..N / 2].iter().all(|&v| v == 6.0) && read[N / 2..].iter().all(|&v| v == 5.0), "the read came first");
    // The window's drop (deregistration, then the free) waits for a read of its view still queued on another stream.
    spin(&busy, &reader, BUSY_NS).unwrap();
    let mut last = reader.alloc_zeros::<f32>(N).unwrap();
    copy_f32::launch(&reader, cfg(), &window.view(), &mut last, N).unwrap();
    drop(window);
    let reuse: Vec<_> = (0..4).map(|_| DeviceBuffer::from_host(&own, &vec![-1.0f32; N]).unwrap()).collect();
    settle(&reader);
    drop(reuse);
    assert!(weft::host::cuda::download(&reader, &last).unwrap().iter().all(|&v| v == 1.0), "the last read");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_registration_s_view_written_on_another_stream_is_seen_by_the_host() {
    let comm = one_rank();
    let [own, writer] = streams::<2>(&comm);
    let busy = spinner(&comm);
    let mut registration = comm.register(DeviceBuffer::from_host(&own, &vec![0.0f32; N]).unwrap()).unwrap();
    let twos = writer.clone_htod(&vec![2.0f32; N]).unwrap();
    spin(&busy, &writer, BUSY_NS).unwrap();
    comm.all_reduce(&twos, &mut registration.buffer_mut(), ReduceOp::Sum, &writer).unwrap();
    // Before: the view's copy waited for the registered buffer's own stream only, and read the zeros.
    assert!(registration.view().copy_to_host().unwrap().iter().all(|&v| v == 2.0), "the host saw the write");
    let back = registration.into_buffer().unwrap();
    assert!(back.copy_to_host().unwrap().iter().all(|&v| v == 2.0));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_live_graph_s_claim_on_a_window_covers_its_views() {
    let comm = one_rank();
    let [replay, other] = streams::<2>(&comm);
    let window = comm.alloc_window::<f32>(&replay, N, WindowFlags::COLL_SYMMETRIC).unwrap();
    let mut out = other.alloc_zeros::<f32>(N).unwrap();
    let want: Vec<f32> = (0..N).map(|i| 3.0 * i as f32).collect();
    let mut graph = Graph::capture(&replay, |c| fill_window::record(c, cfg(), &window, 3.0, N)).unwrap();
    graph.replay().unwrap();
    // Reads of the window's elements on another stream would race with the replays' writes.
    refused(copy_f32::launch(&other, cfg(), &window.view(), &mut out, N), "live CUDA graph");
    refused(comm.all_reduce(&window.view(), &mut out, ReduceOp::Sum, &other), "live CUDA graph");
    // On the replay stream they follow the replays.
    let mut same = replay.alloc_zeros::<f32>(N).unwrap();
    copy_f32::launch(&replay, cfg(), &window.view(), &mut same, N).unwrap();
    assert_eq!(weft::host::cuda::download(&replay, &same).unwrap(), want);
    // Once the graph is gone, any stream may read them, after the replays.
    drop(graph);
    copy_f32::launch(&other, cfg(), &window.view(), &mut out, N).unwrap();
    assert_eq!(weft::host::cuda::download(&other, &out).unwrap(), want);
}
