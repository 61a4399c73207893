// `f32`/`f64` constants in kernels: the macro writes them as exact C++ (hex literals, `__int_as_float`), and nvcc
// compiles them (macros/tests/nvcc.rs).

use weft::prelude::*;

#[weft::kernel]
pub fn float_limits(x: &[f32], out: &mut [f32], wide: &mut [f64], n: usize) {
    for i in grid_stride(n) {
        let mut lo = f32::INFINITY;
        let mut hi = f32::NEG_INFINITY;
        lo = lo.min(x[i]);
        hi = hi.max(x[i]);
        out[i] = if x[i] >= f32::MAX || x[i] <= f32::MIN {
            f32::NAN
        } else {
            hi - lo + f32::EPSILON + f32::MIN_POSITIVE
        };
        wide[i] = f64::INFINITY.min(f64::MAX) + f64::NEG_INFINITY.max(f64::MIN) + f64::EPSILON + f64::MIN_POSITIVE;
        if wide[i] > f64::MAX {
            wide[i] = f64::NAN;
        }
    }
}

/// The usual start of a max-reduction.
#[weft::kernel(types(f32, bf16))]
pub fn block_max<T: Float>(x: &[T], out: &mut [T], n: usize) {
    let mut best = f32::NEG_INFINITY;
    for i in grid_stride(n) {
        best = best.max(x[i].to_f32());
    }
    let best = block_reduce_max(best);
    if thread_idx_x() == 0 {
        out[block_idx_x() as usize] = T::from_f32(best);
    }
}

fn main() {}
