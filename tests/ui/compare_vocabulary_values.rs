// Comparisons rustc allows (teams, coops and tuples derive `PartialEq`) that C++ has no operator for: before, they
// failed in nvcc at the first launch.

use weft::prelude::*;

#[weft::kernel]
pub fn same_team(dev: &DevComm<Lsa>, out: &mut [u32], a: u32) {
    if dev.world() == dev.lsa() {
        out[0] = 1;
    }
    if (a, 1u32) != (2u32, a) {
        out[1] = 1;
    }
    if Lanes::coalesced() == Lanes::from_mask(1) {
        out[2] = 1;
    }
}

fn main() {}
