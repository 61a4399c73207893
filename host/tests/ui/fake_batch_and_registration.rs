// Attack: the same made-up buffer (fake_nccl_buffer.rs) through the other ways into NCCL and CUDA: a batch of grouped
// operations, a registration (NCCL keeps the address for zero-copy collectives) and the host downloads.
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use weft_host::{Batch, Communicator};

struct Fake {
    stream: Arc<CudaStream>,
}

impl DeviceSlice<f32> for Fake {
    fn len(&self) -> usize {
        1 << 30
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
}

impl DevicePtr<f32> for Fake {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (0xdead_0000, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<f32> for Fake {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (0xdead_0000, SyncOnDrop::Sync(None))
    }
}

fn batch<'b>(comm: &'b Communicator, fake: &'b mut Fake, s: &'b CudaStream) {
    let mut batch = Batch::new();
    let _ = batch.recv(comm, fake, 0, s);
}

fn register(comm: &Communicator, fake: &Fake, s: &Arc<CudaStream>) {
    let _ = comm.register(fake);
    let _ = weft_host::cuda::download(s, fake);
    let _ = comm.download(s, fake);
}

fn main() {}
