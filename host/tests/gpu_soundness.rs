//! GPU tests of the run-time guards on weft-host's NCCL call path (docs/soundness.md): element counts that
//! would let NCCL run past a buffer are typed errors; buffer-taking calls refuse to run inside an open NCCL group and
//! a `Batch` launches them instead; nothing is enqueued on a stream that something other than weft is capturing into
//! a CUDA graph; a custom op's device scalar is read as it was when the op was made; a team of another communicator
//! is refused. The tests named `…_on_every_rank` run every rank of the placement (`WEFT_RANKS`), the others one rank.

use std::sync::Arc;

use cudarc::driver::sys::CUstreamCaptureMode;
use cudarc::driver::{CudaSlice, CudaStream};
use weft_host::{
    spmd, Batch, Communicator, Config, DeviceBuffer, Error, Group, Placement, ReduceOp, Requirements, Scalar, UniqueId,
};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

fn stream(comm: &Communicator) -> Arc<CudaStream> {
    comm.context().new_stream().unwrap()
}

fn refused(result: Result<(), Error>, argument: &str, needle: &str) {
    match result {
        Err(Error::InvalidArgument { argument: got, problem }) if got == argument && problem.contains(needle) => {
            println!("refused `{got}`: {problem}")
        }
        other => panic!("expected `{argument}` refused naming `{needle}`, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn counts_that_would_overrun_a_buffer_are_refused_on_every_rank() {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    spmd(placement.devices(), &Config::new(), |comm| {
        let s = stream(comm);
        let (nranks, n) = (comm.nranks(), 64);
        let send = s.alloc_zeros::<f32>(n)?;
        // One element short of nranks blocks: NCCL would write the last block's last element past the end.
        let mut short = s.alloc_zeros::<f32>(n * nranks - 1)?;
        refused(comm.all_gather(&send, &mut short, &s), "recv", "send.len() * nranks");
        refused(comm.reduce_scatter(&short, &mut s.alloc_zeros::<f32>(n)?, ReduceOp::Sum, &s), "send", "recv.len()");
        refused(comm.all_reduce(&send, &mut s.alloc_zeros::<f32>(n - 1)?, ReduceOp::Sum, &s), "recv", "must hold");
        refused(comm.all_to_all(&send, &mut s.alloc_zeros::<f32>(n * 2)?, &s), "recv", "as many elements");
        // Root-only buffers: a root with a receive buffer of one block (every rank refuses before NCCL is called,
        // each naming itself the root), and a root with none.
        let mut one_block = s.alloc_zeros::<f32>(n)?;
        if nranks > 1 {
            refused(comm.gather(&send, Some(&mut one_block), comm.rank(), &s), "recv", "send.len() * nranks");
            refused(comm.scatter(Some(&one_block), &mut short, comm.rank(), &s), "send", "recv.len() * nranks");
        }
        let no_buffer = comm.gather::<f32, CudaSlice<f32>>(&send, None, comm.rank(), &s);
        refused(no_buffer, "recv", "the root must pass a receive buffer");
        // And the right counts still run.
        let mut recv = s.alloc_zeros::<f32>(n * nranks)?;
        comm.all_gather(&send, &mut recv, &s)?;
        comm.wait(&s, weft_host::cuda::SETTLE_TIMEOUT)
    })
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn collectives_refuse_an_open_group_and_a_batch_launches_them_on_every_rank() {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    spmd(placement.devices(), &Config::new(), |comm| {
        let s = stream(comm);
        let (me, nranks, n) = (comm.rank(), comm.nranks(), 256);
        let send = DeviceBuffer::from_host(&s, &vec![me as f32 + 1.0; n])?;
        let mut recv = DeviceBuffer::from_host(&s, &vec![-1.0f32; n])?;
        // Before: this queued the send, returned, and NCCL read the buffer at the group's end, after the borrow (and
        // possibly the buffer) was gone.
        let group = Group::start()?;
        refused(comm.send(&send, (me + 1) % nranks, &s), "self", "weft_host::Batch");
        refused(comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s), "self", "weft_host::Batch");
        refused(Batch::new().launch(), "self", "inside an open NCCL group");
        group.end()?;
        // A ring in one group, the buffers held until it launched.
        let (next, previous) = ((me + 1) % nranks, (me + nranks - 1) % nranks);
        let mut batch = Batch::new();
        batch.send(comm, &send, next, &s)?;
        batch.recv(comm, &mut recv, previous, &s)?;
        batch.launch()?;
        assert_eq!(recv.copy_to_host()?, vec![previous as f32 + 1.0; n], "rank {me}: the ring's value");
        // Receiving parts of one buffer from every rank: an all-gather by point-to-point.
        let mut gathered = DeviceBuffer::from_host(&s, &vec![-1.0f32; n * nranks])?;
        let mut batch = Batch::new();
        for peer in 0..nranks {
            batch.send(comm, &send, peer, &s)?;
        }
        batch.recv_parts(comm, &mut gathered, (0..nranks).map(|p| (p, p * n..(p + 1) * n)), &s)?;
        batch.launch()?;
        let want: Vec<f32> = (0..nranks).flat_map(|p| vec![p as f32 + 1.0; n]).collect();
        assert_eq!(gathered.copy_to_host()?, want, "rank {me}: every part in place");
        Ok(())
    })
    .unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn nothing_is_enqueued_into_a_graph_weft_did_not_start() {
    let comm = one_rank();
    let s = stream(&comm);
    let send = DeviceBuffer::from_host(&s, &[1.0f32; 64]).unwrap();
    let mut recv = DeviceBuffer::<f32>::new(&s, 64).unwrap();
    // Before: cudarc's safe capture recorded the collective into a graph that could be launched after `send` and
    // `recv` were freed.
    s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED).unwrap();
    let collective = comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s);
    let download = weft_host::cuda::download(&s, &send).map(drop);
    let graph = s.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    refused(collective, "stream", "capturing a CUDA graph");
    refused(download, "stream", "capturing a CUDA graph");
    // An empty capture may come back as no graph or as a graph of no nodes (CUDA returns one for an empty capture).
    if let Some(graph) = graph.unwrap() {
        let mut nodes = 0usize;
        // SAFETY: the graph is live (owned by `graph`); a null node array asks only for the count.
        let status =
            unsafe { cudarc::driver::sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut nodes) };
        assert_eq!(status, cudarc::driver::sys::CUresult::CUDA_SUCCESS);
        assert_eq!(nodes, 0, "nothing was captured");
    }
    // The stream works as before once the capture ended.
    comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &s).unwrap();
    assert_eq!(recv.copy_to_host().unwrap(), vec![1.0f32; 64]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_device_scalar_is_read_as_it_was_when_the_op_was_made() {
    let comm = one_rank();
    let s = stream(&comm);
    let writer = stream(&comm);
    let data = s.clone_htod(&[2.0f32; 256]).unwrap();
    let mut scalar = writer.alloc_zeros::<f32>(1).unwrap();
    // Written on another stream just before the op is made: the op waits for that write.
    writer.memcpy_htod(&[0.25f32], &mut scalar).unwrap();
    let op = comm.pre_mul_sum(Scalar::Device(&scalar)).unwrap();
    let mut out = s.alloc_zeros::<f32>(256).unwrap();
    comm.all_reduce(&data, &mut out, ReduceOp::Custom(op.op()), &s).unwrap();
    drop(op);
    // The op is gone: the scalar may be written and freed again, after the all-reduce read it.
    writer.memcpy_htod(&[100.0f32], &mut scalar).unwrap();
    drop(scalar);
    assert_eq!(comm.download(&s, &out).unwrap(), vec![0.5f32; 256]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_team_of_another_communicator_is_refused_on_every_rank() {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    if placement.nranks() < 2 {
        println!("skipped: needs 2 ranks (WEFT_RANKS=2): with one rank every communicator's teams are the same");
        return;
    }
    spmd(placement.devices(), &Config::new(), |comm| {
        let world = comm.team_world()?;
        // Every rank alone: its world team has one rank, the parent's has nranks.
        let alone = comm.split(Some(comm.rank() as u32), 0, None)?.expect("a color was given");
        refused(alone.team_rank_to_world(world, 1).map(drop), "team", "not a team of this communicator");
        let requirements = Requirements::new().lsa_barriers(1).team(world, false);
        let created = alone.dev_comm::<weft_host::caps::Lsa>(&requirements).map(drop);
        refused(created, "requirements", "not a team of this communicator");
        assert_eq!(alone.team_rank_to_world(alone.team_world()?, 0)?, 0);
        drop(alone);
        Ok(())
    })
    .unwrap();
}
