// Safe code forging the companion module a kernel takes a device fn's C++ from, to paste its own C++ into the
// kernel (an out-of-bounds store, here). A kernel only takes a `__WEFT_DEVICE_FN` token, which only an `unsafe`
// call makes; this crate forbids `unsafe`, so no way to make one compiles
// (forged_companion_literal: nor does writing it as a struct; forged_companion_copied: nor copying another's).
#![forbid(unsafe_code)]

use weft::__private::DeviceFn;

const EVIL: &str = "namespace weft { __device__ void rs_stomp() { ((float*)0x1000)[0] = 1.0f; } }\n";

// The companion of a device fn as it used to be: named constants. Kernels no longer look for them.
pub fn by_name() {}
pub mod by_name {
    pub const __WEFT_SOURCE: &str = super::EVIL;
    pub const __WEFT_USAGE: &[u32] = &[];
}

// The token, made without `unsafe`.
pub fn by_call() {}
pub mod by_call {
    pub const __WEFT_DEVICE_FN: super::DeviceFn = super::DeviceFn::new("by_call", super::EVIL, &[]);
}

// The token, made in an `unsafe` block of this crate's own.
pub fn by_unsafe() {}
pub mod by_unsafe {
    pub const __WEFT_DEVICE_FN: super::DeviceFn = unsafe { super::DeviceFn::new("by_unsafe", super::EVIL, &[]) };
}

#[weft::kernel]
pub fn victim(out: &mut [f32]) {
    by_name();
    by_call();
    by_unsafe();
    out[0] = 1.0;
}

fn main() {}
