// Attack: write a receive buffer from the host after queueing the receive but before NCCL has it. The batch holds
// the buffer mutably until it has launched.
#![forbid(unsafe_code)]

use cudarc::driver::CudaStream;
use weft_host::{Batch, Communicator, DeviceBuffer};

fn demo(comm: &Communicator, recv: &mut DeviceBuffer<f32>, s: &CudaStream) {
    let mut batch = Batch::new();
    batch.recv(comm, recv, 0, s).unwrap();
    recv.copy_from_host(&[0.0; 1024]).unwrap();
    batch.launch().unwrap();
}

fn main() {}
