// The buffer and window traits a generated launcher takes are sealed: a type of one's own cannot implement them
// (and so cannot report a made-up address or length to a kernel; fake_buffer.rs passes one).

use weft::host::launch::{KernelSlice, KernelSliceMut, KernelWindow};

struct Fake;

impl KernelSlice<f32> for Fake {}
impl KernelSliceMut<f32> for Fake {}
impl KernelWindow<f32> for Fake {}

fn main() {}
