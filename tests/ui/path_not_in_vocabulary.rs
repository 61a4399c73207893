// Paths rustc resolves (a host type's associated function and enum, a host unit struct, a std-only method of `f32`)
// but that C++ has no `weft::` counterpart for.

use weft::prelude::*;

pub struct Config;

impl Config {
    pub fn scale() -> f32 {
        2.0
    }
}

#[derive(Clone, Copy, PartialEq)]
pub enum Mode {
    Fast,
    Exact,
}

#[weft::kernel]
pub fn scaled(x: &[u32], out: &mut [f32], n: usize) {
    let _marker = Config;
    let mode = Mode::Fast;
    for i in grid_stride(n) {
        let v = f32::from_bits(x[i]) * Config::scale();
        out[i] = if mode == Mode::Exact { v } else { v * 0.5 };
    }
}

fn main() {}
