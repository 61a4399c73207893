// Safe code writing a device fn's companion token as a struct, to paste its own C++ into a kernel: the token's
// fields are private to the facade, so only its `unsafe` constructor makes one (forged_companion.rs).
#![forbid(unsafe_code)]

pub fn by_literal() {}
pub mod by_literal {
    pub const __WEFT_DEVICE_FN: weft::__private::DeviceFn = weft::__private::DeviceFn {
        name: "by_literal",
        source: "namespace weft { __device__ void rs_by_literal() { ((float*)0x1000)[0] = 1.0f; } }\n",
        usage: &[],
    };
}

#[weft::kernel]
pub fn victim(out: &mut [f32]) {
    by_literal();
    out[0] = 1.0;
}

fn main() {}
