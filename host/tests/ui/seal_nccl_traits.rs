// Attack: implement the NCCL buffer traits directly for a type of one's own, to report a made-up address. They are
// sealed: their supertraits live in a private module.
#![forbid(unsafe_code)]

use weft_host::{NcclBuffer, NcclBufferMut};

struct Fake;

impl NcclBuffer<f32> for Fake {}
impl NcclBufferMut<f32> for Fake {}

fn main() {}
