// Former hole: `KernelArgs` (what generated launchers fill) let safe code push any bytes and launch any source. Its
// `launch` is `unsafe` now: its contract is that the source is a `#[weft::kernel]`'s and the arguments are that
// kernel's, in bounds; only the macro's own expansion can vouch for that.

use std::sync::Arc;

use weft::host::jit::{BoundsChecks, KernelSpec};
use weft::host::launch::{CudaStream, KernelArgs};
use weft::host::LaunchConfig;

const EVIL: &str = "extern \"C\" __global__ void evil(unsigned long long p) { *(int*)p = 0; }";

fn demo(stream: &Arc<CudaStream>) {
    let mut args = KernelArgs::new("evil", stream);
    args.push_scalar("p", 0xdead_0000u64);
    let spec = KernelSpec { name: "evil", source: EVIL, entry_point: "evil" };
    let _ = args.launch(&spec, LaunchConfig::linear(1, 1), BoundsChecks::Off);
}

fn main() {}
