// Sessions lent to device fns by reference, and opened by one (C++ constructs the returned session in place); a
// device fn generic over the coop.

use weft::prelude::*;

#[weft::device_fn]
pub fn sync_twice(bar: &LsaBarrier<'_, Cta>) {
    bar.sync(Cta, Order::Release);
    bar.sync(Cta, Order::Acquire);
}

#[weft::device_fn]
pub fn open_barrier<C: HasLsa>(dev: &DevComm<C>) -> LsaBarrier<'_, Cta> {
    dev.lsa_barrier(Cta, block_idx_x())
}

#[weft::device_fn]
pub fn spread<Co: Coop>(coop: Co, out: &mut [u32]) {
    out[coop.thread_rank() as usize] = coop.size();
    coop.sync();
}

#[weft::kernel]
pub fn sessions(dev: &DevComm<Lsa>, out: &mut [u32]) {
    let bar = dev.lsa_barrier(Cta, block_idx_x());
    sync_twice(&bar);
    bar.end();
    let opened: LsaBarrier<'_, Cta> = open_barrier(dev);
    opened.sync(Cta, Order::AcqRel);
    opened.end();
    spread(Warp, out);
}

fn main() {
    let req = sessions::requirements(&weft::host::LaunchConfig::linear(3, 32));
    assert_eq!(req.lsa_barriers, 3, "the device fn's barrier index reaches the kernel's requirements");
}
