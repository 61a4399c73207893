// `GemmTiles<T>` carries the product's element type: storing a bf16 product's tile into an f16 matrix does not
// compile (rustc type-checks the kernel body against weft-device), where C++ would only fail at the first launch.

use weft::prelude::*;

#[weft::kernel(launch_bounds(384, 1))]
pub fn stores_f16(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f16]) {
    let n = b.cols();
    let mut gemm = a.gemm_tiles(&b);
    while gemm.next_tile() {
        out.gemm_store(&gemm, gemm.row0(), gemm.col0(), n);
    }
}

fn main() {}
