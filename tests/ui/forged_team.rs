// A team whose fields a kernel chose: NCCL computes a peer's address from them (`w.peer(team, p)`), so a team with
// a size or stride of one's own would reach outside the window. Teams come from the vocabulary only.
#![forbid(unsafe_code)]

use weft::prelude::*;

#[weft::kernel]
pub fn forged_team(dev: &DevComm<Lsa>, x: &Window<f32>, out: &mut [f32]) {
    let mut team = dev.world();
    team.nranks = 1000;
    team.stride += 7;
    out[0] = x.peer(team, 999)[0];
}

fn main() {}
