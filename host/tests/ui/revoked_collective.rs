// A revoked communicator can only be shrunk, destroyed or aborted.
use cudarc::driver::CudaSlice;
use weft_host::{Communicator, ReduceOp};

fn demo(comm: Communicator, a: &mut CudaSlice<f32>, s: &cudarc::driver::CudaStream) {
    let revoked = comm.revoke().unwrap();
    revoked.all_reduce_in_place(a, ReduceOp::Sum, s).unwrap();
}

fn main() {}
