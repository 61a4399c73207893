// Send and receive buffers of an all-reduce must hold the same element type.
use cudarc::driver::CudaSlice;
use weft_host::{Communicator, ReduceOp};

fn demo(comm: &Communicator, a: &CudaSlice<f32>, b: &mut CudaSlice<i32>, s: &cudarc::driver::CudaStream) {
    comm.all_reduce(a, b, ReduceOp::Sum, s).unwrap();
}

fn main() {}
