// Scalar methods called through their type (`f32::sqrt(x)`, `T::max(a, b)`, `u32::count_ones(n)`): the same C++ as
// the method form (`weft::sqrt(x)`), compiled by nvcc in macros/tests/nvcc.rs.

use weft::prelude::*;

#[weft::kernel(types(f32, f64))]
pub fn scalar_paths<T: Float>(x: &[T], out: &mut [T], counts: &mut [u32], a: u32, small: i8) {
    for i in grid_stride(x.len()) {
        out[i] = T::sqrt(x[i]) + T::max(x[i], T::zero()) + T::mul_add(x[i], x[i], T::one()) + T::abs(x[i]);
    }
    let f = f32::sqrt(2.0) + f32::min(1.0, 2.0) + f32::tanh(0.5) + f32::exp(1.0) + f32::ln(2.0) + f32::rsqrt(4.0);
    let bits = u32::count_ones(a) + u32::min(a, 7) + u32::max(a, 1) + u32::div_ceil(a, 4);
    let signed = small.count_ones() + i8::count_ones(small) + i32::abs(small as i32) as u32;
    counts[0] = bits + signed + f32::to_f32(f) as u32;
}

fn main() {}
