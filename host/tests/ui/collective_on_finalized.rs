// A finalized communicator only supports destroy, abort and queries.
use cudarc::driver::CudaSlice;
use weft_host::Communicator;

fn demo(comm: Communicator, a: &CudaSlice<f32>, b: &mut CudaSlice<f32>, s: &cudarc::driver::CudaStream) {
    let finalized = comm.finalize().unwrap();
    finalized.all_gather(a, b, s).unwrap();
}

fn main() {}
