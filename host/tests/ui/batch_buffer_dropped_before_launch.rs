// Attack: free a buffer between queueing an NCCL operation and launching it. Inside an NCCL group NCCL enqueues an
// operation only at the group's end; a batch borrows each buffer until it has launched.
#![forbid(unsafe_code)]

use cudarc::driver::CudaStream;
use weft_host::{Batch, Communicator, DeviceBuffer};

fn demo(comm: &Communicator, s: &std::sync::Arc<CudaStream>) {
    let mut batch = Batch::new();
    {
        let temporary = DeviceBuffer::<f32>::new(s, 1024).unwrap();
        batch.send(comm, &temporary, 0, s).unwrap();
    } // freed here, before NCCL read it
    batch.launch().unwrap();
}

fn main() {}
