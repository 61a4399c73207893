// A signature error, validation errors and errors only the lowering sees (a method of another type, a resource
// index it cannot follow), reported together: one build shows every problem.

use weft::prelude::*;

#[weft::kernel]
pub fn everything_wrong(dev: &DevComm<Lsa>, out: &mut [u32], scratch: Vec<u32>, which: u32, x: &[u32]) {
    let twice = |v: u32| v * 2;
    let bar = dev.lsa_barrier(Cta, which);
    if x.contains(&3) {
        out[0] = twice(scratch.len() as u32);
    }
    bar.sync(Cta, Order::Relaxed);
}

fn main() {}
