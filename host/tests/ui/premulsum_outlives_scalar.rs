// Attack: free a custom op's device scalar while the op lives. With `ncclScalarDevice` NCCL keeps the scalar's
// address in the op and reads it in every operation that uses it: the op borrows the scalar for its whole life.
#![forbid(unsafe_code)]

use cudarc::driver::{CudaSlice, CudaStream};
use weft_host::{Communicator, ReduceOp, Scalar};

fn demo(comm: &Communicator, mut data: CudaSlice<f32>, scalar: CudaSlice<f32>, s: &CudaStream) {
    let op = comm.pre_mul_sum(Scalar::Device(&scalar)).unwrap();
    drop(scalar);
    let _ = comm.all_reduce_in_place(&mut data, ReduceOp::Custom(op.op()), s);
}

fn main() {}
