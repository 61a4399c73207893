// A registered window borrows its communicator: finalizing while it lives must not compile.
use weft_host::{Communicator, WindowFlags};

fn demo(comm: Communicator, stream: &std::sync::Arc<cudarc::driver::CudaStream>) {
    let window = comm.alloc_window::<f32>(stream, 1024, WindowFlags::DEFAULT).unwrap();
    let finalized = comm.finalize().unwrap();
    drop(window);
    drop(finalized);
}

fn main() {}
