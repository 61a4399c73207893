// Attack: build a team by hand. NCCL indexes ranks with a team's size, rank and stride (a team requirement's multimem
// handle, `ncclTeamRankToWorld`): a made-up one would name ranks the communicator does not have. A team's fields are
// private; teams come only from the communicator (team_world, team_lsa, team_rail).
#![forbid(unsafe_code)]

use weft_host::{Communicator, Requirements, Team};

fn forge(comm: &Communicator) {
    let team = Team { nranks: 4096, rank: 0, stride: 1 };
    let _ = comm.team_rank_to_world(team, 4095);
    let _ = Requirements::new().team(team, true);
}

fn main() {}
