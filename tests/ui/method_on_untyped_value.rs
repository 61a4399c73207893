// A method called on a device fn's result: the macro cannot see the device fn's return type, so it cannot check that
// C++ has the method; it asks for an annotation instead of guessing.

use weft::prelude::*;

#[weft::device_fn]
pub fn open<C: HasLsa>(dev: &DevComm<C>) -> LsaBarrier<'_, Cta> {
    dev.lsa_barrier(Cta, 0)
}

#[weft::kernel]
pub fn publish(dev: &DevComm<Lsa>, out: &mut [f32], n: usize) {
    let bar = open(dev);
    for i in grid_stride(n) {
        out[i] = 1.0;
    }
    bar.sync(Cta, Order::Release);
    bar.end();
}

fn main() {}
