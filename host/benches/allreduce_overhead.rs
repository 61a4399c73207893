//! Host overhead of `all_reduce` through weft against the raw `ncclAllReduce` symbol, same communicator,
//! same buffers, same stream, one rank, 4 KB. Reports the median host time per call of each and the ratio.
//!
//! Both sides enqueue in alternating rounds of `CALLS` calls; the stream is drained between rounds (not
//! timed), so the launch queue never fills and the numbers are host cost, not GPU time.

use std::time::Instant;

use cudarc::driver::DevicePtr;
use weft_host::{result, sys, Communicator, Config, DeviceBuffer, ReduceOp, UniqueId};

const ELEMENTS: usize = 1024; // 4 KB of f32
const CALLS: usize = 200;
const ROUNDS: usize = 60;

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let gpus = weft_host::cuda::device_count().unwrap_or(0);
    if gpus == 0 {
        eprintln!("allreduce_overhead: no CUDA GPU visible; this benchmark needs one (nothing measured)");
        return Ok(());
    }
    let id = UniqueId::new()?;
    let comm = Communicator::init_rank(0, 1, 0, &id, &Config::new())?;
    let stream = comm.context().default_stream();
    let library = sys::library()?;
    let send = stream.clone_htod(&vec![1.0f32; ELEMENTS])?;
    let mut recv = stream.alloc_zeros::<f32>(ELEMENTS)?;
    let vmm_send: DeviceBuffer<f32> = DeviceBuffer::new(&stream, ELEMENTS)?;
    let mut vmm_recv: DeviceBuffer<f32> = DeviceBuffer::new(&stream, ELEMENTS)?;
    let (send_ptr, send_guard) = send.device_ptr(&stream);
    let recv_ptr = {
        let (ptr, _guard) = cudarc::driver::DevicePtrMut::device_ptr_mut(&mut recv, &stream);
        ptr
    };
    drop(send_guard);
    let raw_stream = stream.cu_stream().cast();
    // SAFETY: the communicator is live for the whole benchmark; `as_raw` is used only for the raw calls.
    let raw_comm = unsafe { comm.as_raw() };
    let raw_fn = *library.symbols().ncclAllReduce.as_ref().map_err(|e| e.to_string())?;

    let mut raw_times = Vec::new();
    let mut weft_times = Vec::new();
    let mut weft_vmm_times = Vec::new();
    for round in 0..ROUNDS + 5 {
        let start = Instant::now();
        for _ in 0..CALLS {
            // SAFETY: live communicator, buffers of ELEMENTS f32 on its device, its default stream.
            let status = unsafe {
                raw_fn(
                    send_ptr as _,
                    recv_ptr as _,
                    ELEMENTS,
                    sys::ncclDataType_t::ncclFloat32,
                    sys::ncclRedOp_t::ncclSum,
                    raw_comm,
                    raw_stream,
                )
            };
            assert_eq!(status, sys::ncclResult_t::ncclSuccess);
        }
        let raw = start.elapsed().as_secs_f64() / CALLS as f64;
        weft_host::cuda::settle(&stream)?;

        let start = Instant::now();
        for _ in 0..CALLS {
            comm.all_reduce(&send, &mut recv, ReduceOp::Sum, &stream)?;
        }
        let weft = start.elapsed().as_secs_f64() / CALLS as f64;
        weft_host::cuda::settle(&stream)?;

        let start = Instant::now();
        for _ in 0..CALLS {
            comm.all_reduce(&vmm_send, &mut vmm_recv, ReduceOp::Sum, &stream)?;
        }
        let weft_vmm = start.elapsed().as_secs_f64() / CALLS as f64;
        weft_host::cuda::settle(&stream)?;
        if round >= 5 {
            raw_times.push(raw * 1e6);
            weft_times.push(weft * 1e6);
            weft_vmm_times.push(weft_vmm * 1e6);
        }
    }
    let _ = result::get_version(library)?;
    let (raw, weft, weft_vmm) = (median(raw_times), median(weft_times), median(weft_vmm_times));
    println!(
        "all_reduce host overhead, 1 rank, 4 KB f32, median of {ROUNDS} rounds x {CALLS} calls (NCCL {}):",
        library.version()
    );
    println!("  raw ncclAllReduce            {raw:8.3} us/call");
    println!(
        "  weft, cudarc CudaSlice       {weft:8.3} us/call   ratio {:.3}  delta {:+.3} us",
        weft / raw,
        weft - raw
    );
    println!(
        "  weft, DeviceBuffer (VMM)     {weft_vmm:8.3} us/call   ratio {:.3}  delta {:+.3} us",
        weft_vmm / raw,
        weft_vmm - raw
    );
    drop((vmm_send, vmm_recv));
    comm.finalize()?.destroy()?;
    Ok(())
}
