// Memory registered with NCCL cannot be replaced while it is registered: a window (and a registration) lends its
// elements through a view, never its `DeviceBuffer`, so safe code cannot assign another buffer over it or swap it
// out (NCCL and the peers would keep mapping the old memory, freed, and launches would see the new length).
#![forbid(unsafe_code)]

use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft_host::{DeviceBuffer, Registration, Window};

fn swap_out(window: &mut Window<'_, f32>, other: &mut DeviceBuffer<f32>) {
    std::mem::swap(window.buffer_mut(), other);
}

fn assign_over(window: &mut Window<'_, f32>, stream: &Arc<CudaStream>) {
    *window.buffer_mut() = DeviceBuffer::new(stream, 1).unwrap();
}

fn replace_through_the_shared_borrow(window: &Window<'_, f32>, other: DeviceBuffer<f32>) {
    let _old = std::mem::replace(window.buffer(), other);
}

fn swap_a_registration(registration: &mut Registration<'_, f32>, other: &mut DeviceBuffer<f32>) {
    std::mem::swap(registration.buffer_mut(), other);
}

fn main() {}
