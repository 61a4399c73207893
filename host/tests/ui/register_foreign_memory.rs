// `ncclCommRegister` takes weft memory only: a registration owns a `DeviceBuffer` (allocated by weft, freed only
// after deregistration). A type that reports any address through cudarc's safe `DevicePtr` traits is refused.
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::{CudaStream, DevicePtr, DeviceSlice, SyncOnDrop};
use weft_host::Communicator;

struct Pretend(Arc<CudaStream>);

impl DeviceSlice<f32> for Pretend {
    fn len(&self) -> usize {
        1 << 30
    }
    fn stream(&self) -> &Arc<CudaStream> {
        &self.0
    }
}

impl DevicePtr<f32> for Pretend {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (0x7000_0000, SyncOnDrop::Record(None))
    }
}

fn register_anything(comm: &Communicator, stream: &Arc<CudaStream>) {
    let pretend = Pretend(stream.clone());
    let _registration = comm.register(&pretend).unwrap();
}

fn main() {}
