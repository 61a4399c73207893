// A kernel declared `&DevComm<Lsa>` calling a GIN item: GIN items exist only on `DevComm<C: HasGin>`.

use weft::prelude::*;

#[weft::kernel]
pub fn ring_put(dev: &DevComm<Lsa>, src: &Window<f32>, dst: &Window<f32>, n: usize) {
    let gin = dev.gin(0);
    let next = (dev.rank() + 1) % dev.nranks();
    gin.put(dev.world(), next, dst, src, n, SignalInc(0), NoAction, Cta);
}

fn main() {}
