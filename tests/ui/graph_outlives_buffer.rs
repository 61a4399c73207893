// A CUDA graph replays on the memory it recorded, so it borrows every buffer, window and device communicator for its
// whole life: a graph that outlives one of them does not compile (docs/graphs.md).

use std::sync::Arc;

use weft::host::cudarc::driver::CudaStream;
use weft::host::{Communicator, DeviceBuffer, Error, Graph, ReduceOp};
use weft::prelude::*;

#[weft::kernel]
pub fn fill(out: &mut [f32], value: f32, n: usize) {
    for i in grid_stride(n) {
        out[i] = value;
    }
}

fn collective_outlives(comm: &Communicator, stream: &Arc<CudaStream>) -> Result<(), Error> {
    let graph;
    {
        let buffer = DeviceBuffer::<f32>::new(stream, 16)?;
        graph = Graph::capture(stream, |c| c.all_reduce_in_place(comm, &buffer, ReduceOp::Sum))?;
    }
    drop(graph);
    Ok(())
}

fn kernel_outlives(stream: &Arc<CudaStream>) -> Result<(), Error> {
    let graph;
    {
        let out = DeviceBuffer::<f32>::new(stream, 16)?;
        graph = Graph::capture(stream, |c| fill::record(c, LaunchConfig::linear(1, 32), &out, 1.0, 16))?;
    }
    drop(graph);
    Ok(())
}

fn cudarc_memory_is_not_recorded(stream: &Arc<CudaStream>) -> Result<(), Error> {
    let out = stream.alloc_zeros::<f32>(16).map_err(Error::from)?;
    let graph = Graph::capture(stream, |c| fill::record(c, LaunchConfig::linear(1, 32), &out, 1.0, 16))?;
    drop(graph);
    Ok(())
}

fn main() {}
