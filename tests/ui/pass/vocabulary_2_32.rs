// The vocabulary that needs NCCL 2.32's device headers (GIN gets, VA signals, strong/weak actions, world barriers):
// macros/tests/nvcc.rs compiles this file's kernels against 2.32 only; against 2.28 weft.cuh stops them with a
// static_assert naming the version (device/tests/cuda/unavailable.cu checks that).

use weft::prelude::*;

#[weft::kernel]
pub fn gin_2_32(
    dev: &DevComm<LsaGin>,
    src: &Window<f32>,
    dst: &Window<f32>,
    flag: &Window<u64>,
    count: usize,
    out: &mut [u64],
) {
    let gin = dev.gin(0);
    let world = dev.world();
    gin.get(world, 0, src, dst, count, Cta);
    gin.put(world, 0, dst, src, count, StrongSignalInc(0), WeakCounterInc(0), Cta);
    gin.put(world, 0, dst, src, count, WeakSignalAdd(0, 2), NoAction, Cta);
    gin.put(world, 0, dst, src, count, StrongSignalAdd(0, 2), NoAction, Cta);
    gin.signal(world, 0, WeakSignalInc(0), Cta);
    gin.signal(world, 0, VaSignalInc(flag), Cta);
    gin.signal(world, 0, VaSignalAdd(flag, 3), Cta);
    gin.signal(world, 0, StrongVaSignalInc(flag), Cta);
    gin.signal(world, 0, WeakVaSignalInc(flag), Cta);
    gin.signal(world, 0, StrongVaSignalAdd(flag, 3), Cta);
    gin.signal(world, 0, WeakVaSignalAdd(flag, 3), Cta);
    gin.wait_va_signal(Cta, flag, 1);
    out[0] = gin.read_va_signal(flag);
    gin.reset_va_signal(flag);
    let bar = gin.world_barrier(Cta, 0);
    bar.sync(Cta, Order::AcqRel);
    bar.end();
}

fn main() {}
