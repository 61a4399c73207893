// Attack: hand NCCL a made-up address and length. cudarc's `DevicePtr`/`DevicePtrMut` are safe traits, so a type of
// one's own can report any address (here one it made up) and any length (a billion floats); NCCL would read or write
// there. Every NCCL call takes only the sealed `NcclBuffer`/`NcclBufferMut`, which such a type does not implement.
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use weft_host::{Communicator, ReduceOp};

/// Claims a billion floats at an address it made up.
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

fn collectives(comm: &Communicator, real: &mut CudaSlice<f32>, fake: &mut Fake, s: &CudaStream) {
    // NCCL would read a billion floats at the made-up address ...
    let _ = comm.all_reduce(&*fake, real, ReduceOp::Sum, s);
    // ... or write them there.
    let _ = comm.all_gather(&*real, fake, s);
    let _ = comm.reduce_scatter_in_place(fake, ReduceOp::Sum, s);
    let _ = comm.gather(&*real, Some(fake), 0, s);
    let _ = comm.send(&*fake, 0, s);
    let _ = comm.recv(fake, 0, s);
}

fn main() {}
