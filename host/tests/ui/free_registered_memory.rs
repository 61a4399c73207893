// Registered memory cannot be freed while it is registered: a registration owns its buffer (so does a window), and
// everything that reaches the memory borrows its owner, so neither the buffer nor its owner can go while a view,
// a CUDA graph or the registration itself still uses it.
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft_host::{Communicator, DeviceBuffer, Error, Graph, ReduceOp, WindowFlags};

fn free_a_registered_buffer(comm: &Communicator, stream: &Arc<CudaStream>) -> Result<(), Error> {
    let buffer = DeviceBuffer::<f32>::new(stream, 16)?;
    let registration = comm.register(buffer)?;
    drop(buffer);
    drop(registration);
    Ok(())
}

fn take_the_buffer_back_under_a_view(comm: &Communicator, stream: &Arc<CudaStream>) -> Result<(), Error> {
    let mut window = comm.alloc_window::<f32>(stream, 16, WindowFlags::DEFAULT)?;
    let mut view = window.buffer_mut();
    let buffer = window.into_buffer()?;
    view.copy_from_host(&[0.0; 16])?;
    drop(buffer);
    Ok(())
}

fn deregister_under_a_graph(comm: &Communicator, stream: &Arc<CudaStream>) -> Result<(), Error> {
    let window = comm.alloc_window::<f32>(stream, 16, WindowFlags::COLL_SYMMETRIC)?;
    let mut graph = Graph::capture(stream, |c| c.all_reduce_in_place(comm, window.buffer(), ReduceOp::Sum))?;
    let buffer = window.into_buffer()?;
    graph.replay()?;
    drop(buffer);
    Ok(())
}

fn main() {}
