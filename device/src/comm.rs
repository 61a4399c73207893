//! The device communicator and teams.

use core::marker::PhantomData;

use crate::caps::CapabilitySet;
use crate::device_only;

/// A device communicator inside a kernel: NCCL's `ncclDevComm`, with its capability set `C` as a type (see
/// [`caps`](crate::caps)).
///
/// Kernels take it as `dev: &DevComm<C>`. In C++ the entry point receives NCCL's struct by value and the body
/// wraps it as `weft::DevComm dev{dev__raw};` (rule R1); `C` exists only in Rust. The items available depend on
/// `C`: everything here on every set; LSA barriers and reduce-copies with `C: HasLsa`, [`gin`](Self::gin) with
/// `C: HasGin`, multimem with `C: HasMultimem`.
///
/// Ranks and sizes are `u32` (NCCL's `int`, never negative).
#[derive(Debug)]
pub struct DevComm<C> {
    _caps: PhantomData<C>,
}

/// A team: a set of ranks `{ first, first + stride, … }` of the world, with this rank's position in it.
/// C++ `weft::Team` (same fields), converted to NCCL's `ncclTeam` where NCCL takes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Team {
    /// Ranks in the team.
    pub nranks: u32,
    /// This rank's index in the team.
    pub rank: u32,
    /// Distance between consecutive team members, in world ranks.
    pub stride: u32,
}

impl Team {
    /// Whether rank `rank` of team `other` is a member of `self` (`ncclTeamRankIsMember(self, other, rank)`).
    /// C++ `team.contains(other, rank)`.
    pub fn contains(self, other: Team, rank: u32) -> bool {
        device_only("Team::contains")
    }

    /// The rank in `self` of rank `rank` of team `other` (`ncclTeamRankToTeam(self, other, rank)`); meaningful
    /// when [`contains`](Self::contains) says so. C++ `team.rank_from(other, rank)`.
    pub fn rank_from(self, other: Team, rank: u32) -> u32 {
        device_only("Team::rank_from")
    }

    /// The sub-team of `inner_size` consecutive members that contains this rank (`ncclTeamInnerFactor`).
    /// C++ `team.inner_factor(inner_size)`.
    pub fn inner_factor(self, inner_size: u32) -> Team {
        device_only("Team::inner_factor")
    }

    /// The team of this rank's counterparts in the other inner sub-teams (`ncclTeamOuterFactor`).
    /// C++ `team.outer_factor(inner_size)`.
    pub fn outer_factor(self, inner_size: u32) -> Team {
        device_only("Team::outer_factor")
    }
}

impl<C: CapabilitySet> DevComm<C> {
    /// This rank in the world (`ncclDevComm::rank`). C++ `dev.rank()`.
    pub fn rank(&self) -> u32 {
        device_only("DevComm::rank")
    }

    /// Ranks in the world (`ncclDevComm::nRanks`). C++ `dev.nranks()`.
    pub fn nranks(&self) -> u32 {
        device_only("DevComm::nranks")
    }

    /// This rank in the LSA team (`ncclDevComm::lsaRank`). C++ `dev.lsa_rank()`.
    pub fn lsa_rank(&self) -> u32 {
        device_only("DevComm::lsa_rank")
    }

    /// Ranks in the LSA team, the ranks whose memory this GPU reaches by load and store (`ncclDevComm::lsaSize`;
    /// 1 without LSA). C++ `dev.lsa_size()`.
    pub fn lsa_size(&self) -> u32 {
        device_only("DevComm::lsa_size")
    }

    /// The world team (`ncclTeamWorld`). C++ `dev.world()`.
    pub fn world(&self) -> Team {
        device_only("DevComm::world")
    }

    /// The LSA team (`ncclTeamLsa`). C++ `dev.lsa()`.
    pub fn lsa(&self) -> Team {
        device_only("DevComm::lsa")
    }

    /// The rail team: this rank's counterparts in the other LSA teams (`ncclTeamRail`). C++ `dev.rail()`.
    pub fn rail(&self) -> Team {
        device_only("DevComm::rail")
    }

    /// The world rank of rank `rank` of `team` (`ncclTeamRankToWorld`). C++ `dev.team_rank_to_world(team, rank)`.
    pub fn team_rank_to_world(&self, team: Team, rank: u32) -> u32 {
        device_only("DevComm::team_rank_to_world")
    }

    /// The LSA rank of rank `rank` of `team` (`ncclTeamRankToLsa`), for a rank inside the LSA team.
    /// C++ `dev.team_rank_to_lsa(team, rank)`.
    pub fn team_rank_to_lsa(&self, team: Team, rank: u32) -> u32 {
        device_only("DevComm::team_rank_to_lsa")
    }
}
