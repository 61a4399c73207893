// Attack: rewrite a custom op's device scalar while operations using the op may still read it. The op holds a shared
// borrow of the scalar for its life, so nothing can write it (cudarc's writes take `&mut`).
#![forbid(unsafe_code)]

use cudarc::driver::{CudaSlice, CudaStream};
use weft_host::{Communicator, ReduceOp, Scalar};

fn demo(comm: &Communicator, mut data: CudaSlice<f32>, mut scalar: CudaSlice<f32>, s: &std::sync::Arc<CudaStream>) {
    let op = comm.pre_mul_sum(Scalar::Device(&scalar)).unwrap();
    let _ = comm.all_reduce_in_place(&mut data, ReduceOp::Custom(op.op()), s);
    s.memcpy_htod(&[2.0f32], &mut scalar).unwrap();
    let _ = comm.all_reduce_in_place(&mut data, ReduceOp::Custom(op.op()), s);
}

fn main() {}
