// Items that need NCCL 2.32 device headers. header.rs compiles this against every older NCCL and expects it to
// fail with one weft message per item (and nothing else), and against 2.32+ and expects it to compile: including
// weft.cuh is always fine, only using these items is an error.
#include "weft.cuh"

extern "C" __global__ void needs_2_32(ncclDevComm dev__raw, weft::Window<float> x, weft::Window<uint64_t> sig,
                                      weft::Window<__half> h, weft::Slice<__half> hin) {
  weft::DevComm dev{dev__raw};
  auto gin = dev.gin(0);
  weft::Team rail = dev.rail();
  gin.put(rail, 1, x, x, 1, weft::StrongSignalInc(0), weft::NoAction{}, weft::Cta{});      // 1
  gin.put(rail, 1, x, x, 1, weft::WeakSignalAdd(0, 1), weft::NoAction{}, weft::Cta{});     // 2
  gin.signal(rail, 1, weft::VaSignalInc(sig), weft::Cta{});                               // 3
  gin.put(rail, 1, x, x, 1, weft::NoAction{}, weft::WeakCounterInc(0), weft::Cta{});       // 4
  gin.get(rail, 1, x, x, 1, weft::Cta{});                                                 // 5
  uint64_t v = gin.read_va_signal(sig);                                                   // 6
  gin.wait_va_signal(weft::Cta{}, sig, v);                                                // 7
  gin.reset_va_signal(sig);                                                               // 8
  auto world = gin.world_barrier(weft::Cta{}, 0);                                         // 9
  world.sync(weft::Cta{}, weft::Order::AcqRel);
  dev.multimem_copy(weft::Cta{}, hin, h, 8);                                              // 10
}
