// Attack: take the private stream a CUDA graph is being captured on, and enqueue on it work that borrows nothing for
// the graph's life (here a cudarc copy into a buffer freed before the replays). `KernelArgs::stream` used to hand it
// out; only the capture's own recorders reach it now.
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft_host::launch::KernelArgs;
use weft_host::Graph;

fn demo(stream: &Arc<CudaStream>) {
    let _ = Graph::capture(stream, |capture| {
        let args = KernelArgs::for_capture("k", &[], capture);
        let capturing = args.stream().clone();
        let mut scratch = capturing.alloc_zeros::<f32>(16).unwrap();
        capturing.memcpy_htod(&[1.0f32; 16], &mut scratch).unwrap();
        Ok(())
    });
}

fn main() {}
