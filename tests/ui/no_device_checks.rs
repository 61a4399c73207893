// `#[kernel(no_device_checks)]`: an access the macro cannot prove in bounds is an error where it is written,
// saying why and how to make it provable, instead of a check on the device.

use weft::prelude::*;

#[weft::kernel(no_device_checks)]
pub fn gather(x: &[f32], idx: &[u32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = x[idx[i] as usize];
    }
}

#[weft::kernel(no_device_checks)]
pub fn strided(out: &mut [f32], n: usize, m: usize) {
    for i in grid_stride(n) {
        out[i % m] = 1.0;
    }
}


// The device fns a kernel calls count too: their accesses are checked on the device (their lengths are the
// caller's), which the kernel's module refuses to compile.
#[weft::device_fn]
fn element(x: &[f32], i: usize) -> f32 {
    x[i]
}

#[weft::kernel(no_device_checks)]
pub fn through_a_device_fn(x: &[f32], out: &mut [f32], n: usize) {
    for i in grid_stride(n) {
        out[i] = element(x, i);
    }
}

fn main() {}
