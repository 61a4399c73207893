// Former hole: any type could report any device address and length to a launch, because the buffer traits were
// blanket impls over cudarc's `DevicePtr`/`DevicePtrMut`, which safe code may implement. They are sealed now: a
// type of one's own does not pass as a kernel buffer (and cannot implement the traits: seal_kernel_traits.rs).

use std::sync::Arc;

use cudarc::driver::{CudaStream as Stream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use weft::host::launch::CudaStream;
use weft::prelude::*;

#[weft::kernel]
pub fn fill(out: &mut [f32], value: f32, n: usize) {
    for i in grid_stride(n) {
        out[i] = value;
    }
}

/// Claims a billion floats at an address it made up.
struct Fake {
    stream: Arc<Stream>,
}

impl DeviceSlice<f32> for Fake {
    fn len(&self) -> usize {
        1 << 30
    }
    fn stream(&self) -> &Arc<Stream> {
        &self.stream
    }
}

impl DevicePtr<f32> for Fake {
    fn device_ptr<'a>(&'a self, _stream: &'a Stream) -> (u64, SyncOnDrop<'a>) {
        (0xdead_0000, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<f32> for Fake {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a Stream) -> (u64, SyncOnDrop<'a>) {
        (0xdead_0000, SyncOnDrop::Sync(None))
    }
}

fn demo(stream: &Arc<CudaStream>, fake: &mut Fake) {
    let _ = fill::launch(stream, LaunchConfig::linear(1, 32), fake, 1.0, 1 << 30);
}

fn main() {}
