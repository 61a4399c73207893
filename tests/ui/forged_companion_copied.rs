// Safe code passing off one device fn's companion token as another function's: a kernel calling `add_one` would
// get `clear`'s C++ (whose Rust signature rustc never checked against this call). The token carries the name of
// the function it was made for, and the kernel's module checks it against the callee's.
#![forbid(unsafe_code)]

#[weft::device_fn]
pub fn clear(out: &mut [f32]) {
    for i in 0..out.len() {
        out[i] = 0.0;
    }
}

pub fn add_one(x: f32) -> f32 {
    x + 1.0
}
pub mod add_one {
    pub const __WEFT_DEVICE_FN: weft::__private::DeviceFn = super::clear::__WEFT_DEVICE_FN;
}

#[weft::kernel]
pub fn victim(out: &mut [f32]) {
    out[0] = add_one(out[0]);
}

fn main() {}
