// A `&dyn Trait` device fn parameter.

pub trait Scale {
    fn apply(&self, x: f32) -> f32;
}

#[weft::device_fn]
pub fn apply_scale(scale: &dyn Scale, x: f32) -> f32 {
    scale.apply(x)
}

fn main() {}
