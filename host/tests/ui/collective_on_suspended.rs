// A suspended communicator cannot run collectives until it is resumed.
use cudarc::driver::CudaSlice;
use weft_host::{Communicator, ReduceOp, SuspendFlags};

fn demo(comm: Communicator, a: &CudaSlice<f32>, b: &mut CudaSlice<f32>, s: &cudarc::driver::CudaStream) {
    let suspended = comm.suspend(SuspendFlags::MEMORY).unwrap();
    suspended.all_reduce(a, b, ReduceOp::Sum, s).unwrap();
}

fn main() {}
