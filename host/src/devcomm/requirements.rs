//! What a device communicator must provide: the [`Requirements`] builder, and [`Team`]s.

use crate::abi::{verified_list, Abi};
use crate::comm::{Communicator, Mode};
use crate::error::Error;
use crate::properties::GinConnectionType;
use crate::result;
use crate::sys;
use crate::version::Version;

/// What a device communicator must provide: barriers, GIN signals and counters, LL all-to-all slots,
/// resource buffers, team multimem handles. Counts combine by maximum ([`Requirements::merge`]), so the
/// requirements of several kernels can share one `DevComm`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Requirements {
    /// LSA barriers (`lsaBarrierCount`); a kernel indexing its barrier by block needs one per block.
    pub lsa_barriers: u32,
    /// Hybrid barriers: LSA + rail GIN (`barrierCount`).
    pub hybrid_barriers: u32,
    /// Rail GIN barriers (`railGinBarrierCount`).
    pub rail_gin_barriers: u32,
    /// World GIN barriers (`worldGinBarrierCount`, NCCL 2.30+).
    pub world_gin_barriers: u32,
    /// GIN signals, ids `0..n` (`ginSignalCount`).
    pub gin_signals: u32,
    /// GIN counters, ids `0..n` (`ginCounterCount`).
    pub gin_counters: u32,
    /// GIN contexts hint (`ginContextCount`; 0 leaves NCCL's default).
    pub gin_contexts: u32,
    /// GIN connection layout (`ginConnectionType`, NCCL 2.29+).
    pub gin_connection: Option<GinConnectionType>,
    /// LL all-to-all: (blocks, slots) (`lsaLLA2ABlockCount`, `lsaLLA2ASlotCount`).
    pub ll_a2a: Option<(u32, u32)>,
    /// Multimem on the LSA team (`lsaMultimem`).
    pub lsa_multimem: bool,
    /// Extra resource buffers: (bytes, alignment); their handles come back in [`DevComm::resource_buffer`](crate::DevComm::resource_buffer).
    pub resource_buffers: Vec<(usize, usize)>,
    /// Teams the kernels use beyond world/LSA/rail, each with or without a multimem handle
    /// (`teamRequirementsList`); the handles come back in [`DevComm::team_multimem_handle`](crate::DevComm::team_multimem_handle).
    pub teams: Vec<(Team, bool)>,
}

/// A team of ranks as NCCL describes it (`ncclTeam`): this rank's index in it, its size and the stride
/// between its members' world ranks. Get one from [`Communicator::team_world`], [`Communicator::team_lsa`] or
/// [`Communicator::team_rail`].
///
/// Its fields are private: NCCL indexes its ranks with them (a team requirement's multimem handle, a rank
/// translation), so a team is only ever one NCCL reported, and a communicator takes only its own teams
/// ([`Requirements::team`] and [`Communicator::team_rank_to_world`] check).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Team {
    pub(crate) nranks: i32,
    pub(crate) rank: i32,
    pub(crate) stride: i32,
}

impl Team {
    fn from_raw(raw: sys::ncclTeam_t) -> Team {
        Team { nranks: raw.nRanks, rank: raw.rank, stride: raw.stride }
    }

    /// Ranks in the team.
    pub fn nranks(&self) -> i32 {
        self.nranks
    }

    /// This rank's index in the team.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// World-rank distance between consecutive members.
    pub fn stride(&self) -> i32 {
        self.stride
    }

    pub(super) fn raw(self) -> sys::ncclTeam_t {
        sys::ncclTeam_t { nRanks: self.nranks, rank: self.rank, stride: self.stride }
    }
}

impl<S: crate::comm::Initialized, M: Mode> Communicator<S, M> {
    /// Every rank (`ncclTeamWorld`).
    pub fn team_world(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_world(self.library(), self.raw()) }?))
    }

    /// The ranks this one reaches by load/store (`ncclTeamLsa`).
    pub fn team_lsa(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_lsa(self.library(), self.raw()) }?))
    }

    /// The ranks with this rank's LSA index in the other LSA teams (`ncclTeamRail`).
    pub fn team_rail(&self) -> Result<Team, Error> {
        // SAFETY: our live, initialised communicator.
        Ok(Team::from_raw(unsafe { result::team_rail(self.library(), self.raw()) }?))
    }

    /// The world rank of rank `rank` of `team` (`ncclTeamRankToWorld`); `team` is one of this communicator's.
    pub fn team_rank_to_world(&self, team: Team, rank: i32) -> Result<i32, Error> {
        self.check_team("team", team)?;
        if rank < 0 || rank >= team.nranks {
            return Err(Error::invalid("rank", format!("{rank} is not a rank of a team of {}", team.nranks)));
        }
        // SAFETY: our live, initialised communicator and one of its own teams (checked), with a rank inside it.
        unsafe { result::team_rank_to_world(self.library(), self.raw(), team.raw(), rank) }
    }

    /// Whether `team` is one of this communicator's teams (world, LSA, rail): a team of another communicator, whose
    /// sizes and strides mean other ranks, is refused.
    pub(crate) fn check_team(&self, argument: &'static str, team: Team) -> Result<(), Error> {
        if team == self.team_world()? || team == self.team_lsa()? || team == self.team_rail()? {
            return Ok(());
        }
        Err(Error::invalid(
            argument,
            format!(
                "{team:?} is not a team of this communicator (rank {} of {}): take it from this communicator's \
                 team_world, team_lsa or team_rail",
                self.rank(),
                self.nranks()
            ),
        ))
    }
}

impl Requirements {
    /// Nothing required.
    pub fn new() -> Requirements {
        Requirements::default()
    }

    /// At least `count` LSA barriers.
    pub fn lsa_barriers(mut self, count: u32) -> Self {
        self.lsa_barriers = self.lsa_barriers.max(count);
        self
    }

    /// At least `count` hybrid (LSA + rail GIN) barriers.
    pub fn hybrid_barriers(mut self, count: u32) -> Self {
        self.hybrid_barriers = self.hybrid_barriers.max(count);
        self
    }

    /// At least `count` rail GIN barriers.
    pub fn rail_gin_barriers(mut self, count: u32) -> Self {
        self.rail_gin_barriers = self.rail_gin_barriers.max(count);
        self
    }

    /// At least `count` world GIN barriers (NCCL 2.30+).
    pub fn world_gin_barriers(mut self, count: u32) -> Self {
        self.world_gin_barriers = self.world_gin_barriers.max(count);
        self
    }

    /// At least `count` GIN signals.
    pub fn gin_signals(mut self, count: u32) -> Self {
        self.gin_signals = self.gin_signals.max(count);
        self
    }

    /// At least `count` GIN counters.
    pub fn gin_counters(mut self, count: u32) -> Self {
        self.gin_counters = self.gin_counters.max(count);
        self
    }

    /// A hint for the number of GIN contexts.
    pub fn gin_contexts(mut self, count: u32) -> Self {
        self.gin_contexts = self.gin_contexts.max(count);
        self
    }

    /// The GIN connection layout (NCCL 2.29+).
    pub fn gin_connection(mut self, kind: GinConnectionType) -> Self {
        self.gin_connection = Some(kind);
        self
    }

    /// LL all-to-all over `blocks` blocks with `slots` slots.
    pub fn ll_a2a(mut self, blocks: u32, slots: u32) -> Self {
        let (b, s) = self.ll_a2a.unwrap_or((0, 0));
        self.ll_a2a = Some((b.max(blocks), s.max(slots)));
        self
    }

    /// Multimem on the LSA team (when `enabled`).
    pub fn lsa_multimem(mut self, enabled: bool) -> Self {
        self.lsa_multimem |= enabled;
        self
    }

    /// A team the kernels use, with a multimem handle if `multimem`.
    pub fn team(mut self, team: Team, multimem: bool) -> Self {
        self.teams.push((team, multimem));
        self
    }

    /// One more resource buffer of `bytes` bytes aligned to `align`.
    pub fn resource_buffer(mut self, bytes: usize, align: usize) -> Self {
        self.resource_buffers.push((bytes, align));
        self
    }

    /// Both requirements: every count at its maximum, resource buffers of both.
    pub fn merge(mut self, other: &Requirements) -> Self {
        self.lsa_barriers = self.lsa_barriers.max(other.lsa_barriers);
        self.hybrid_barriers = self.hybrid_barriers.max(other.hybrid_barriers);
        self.rail_gin_barriers = self.rail_gin_barriers.max(other.rail_gin_barriers);
        self.world_gin_barriers = self.world_gin_barriers.max(other.world_gin_barriers);
        self.gin_signals = self.gin_signals.max(other.gin_signals);
        self.gin_counters = self.gin_counters.max(other.gin_counters);
        self.gin_contexts = self.gin_contexts.max(other.gin_contexts);
        self.gin_connection = self.gin_connection.or(other.gin_connection);
        if let Some((blocks, slots)) = other.ll_a2a {
            self = self.ll_a2a(blocks, slots);
        }
        self.lsa_multimem |= other.lsa_multimem;
        self.resource_buffers.extend_from_slice(&other.resource_buffers);
        for team in &other.teams {
            if !self.teams.contains(team) {
                self.teams.push(*team);
            }
        }
        self
    }

    /// Whether a device communicator created with `self` satisfies `needed`; otherwise an error naming the
    /// first shortfall and the fix.
    pub fn covers(&self, needed: &Requirements) -> Result<(), Error> {
        let counts = [
            ("LSA barriers", self.lsa_barriers, needed.lsa_barriers),
            ("hybrid barriers", self.hybrid_barriers, needed.hybrid_barriers),
            ("rail GIN barriers", self.rail_gin_barriers, needed.rail_gin_barriers),
            ("world GIN barriers", self.world_gin_barriers, needed.world_gin_barriers),
            ("GIN signals", self.gin_signals, needed.gin_signals),
            ("GIN counters", self.gin_counters, needed.gin_counters),
        ];
        for (what, have, need) in counts {
            if have < need {
                return Err(Error::invalid(
                    "dev",
                    format!(
                        "the device communicator has {have} {what} but the launch needs {need}: create it with \
                         the kernel's requirements (`kernel::requirements(&cfg)`) or a smaller grid"
                    ),
                ));
            }
        }
        let (have, need) = (self.ll_a2a.unwrap_or((0, 0)), needed.ll_a2a.unwrap_or((0, 0)));
        if have.0 < need.0 || have.1 < need.1 {
            return Err(Error::invalid(
                "dev",
                format!("LL all-to-all has {have:?} (blocks, slots), the launch needs {need:?}"),
            ));
        }
        if needed.lsa_multimem && !self.lsa_multimem {
            return Err(Error::invalid("dev", "the launch needs LSA multimem; request it in the requirements"));
        }
        Ok(())
    }

    /// Refuses what NCCL would turn into addresses it cannot back: teams that are not `comm`'s own (see [`Team`]),
    /// and resource buffers whose sizes and alignments do not add up without overflowing (NCCL lays them out one
    /// after the other, at alignments of at least 128 bytes, in one allocation).
    pub(crate) fn check_against<S: crate::comm::Initialized, M: Mode>(
        &self,
        comm: &Communicator<S, M>,
    ) -> Result<(), Error> {
        self.teams.iter().try_for_each(|(team, _)| comm.check_team("requirements", *team))?;
        check_resource_layout(&self.resource_buffers)
    }

    /// Refuses fields the layout weft declares to the loaded release lacks (never silently dropped).
    pub(super) fn check_version(&self, abi: &Abi) -> Result<(), Error> {
        let need = |used: bool, needs: Version, call: &'static str| match () {
            _ if !used || abi.declared.at_least(needs) => Ok(()),
            _ if abi.found.at_least(needs) => {
                Err(Error::UnverifiedRelease { found: abi.found, what: call.to_owned(), verified: verified_list() })
            }
            _ => Err(Error::Unsupported { call, needs, found: abi.found }),
        };
        // 2.29.2 and 2.29.3 end their requirements at ginCounterCount; 2.29.7 is the first measured with more.
        need(self.gin_connection.is_some(), Version::new(2, 29, 7), "ncclDevCommRequirements.ginConnectionType")?;
        need(self.world_gin_barriers > 0, Version::new(2, 30, 0), "ncclDevCommRequirements.worldGinBarrierCount")
    }
}

/// Whether NCCL's layout of `buffers` (each at its alignment, at least 128 bytes) fits the address space.
fn check_resource_layout(buffers: &[(usize, usize)]) -> Result<(), Error> {
    // Far below any real limit, far above any real buffer: what NCCL's size arithmetic never overflows with.
    const MOST: usize = 1 << 48;
    let mut total: usize = 0;
    for &(bytes, align) in buffers {
        if align != 0 && !align.is_power_of_two() {
            return Err(Error::invalid(
                "requirements",
                format!("resource buffer alignment {align} is not a power of two"),
            ));
        }
        let align = align.max(128);
        let end = total
            .checked_next_multiple_of(align)
            .and_then(|start| start.checked_add(bytes))
            .filter(|&end| end <= MOST)
            .ok_or_else(|| {
                Error::invalid("requirements", format!("resource buffers of {bytes} bytes add up past {MOST} bytes"))
            })?;
        total = end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_takes_maxima_and_covers_reports_shortfalls() {
        let a = Requirements::new().lsa_barriers(8).gin_signals(2);
        let b = Requirements::new().lsa_barriers(132).ll_a2a(4, 16);
        let both = a.clone().merge(&b);
        assert_eq!((both.lsa_barriers, both.gin_signals, both.ll_a2a), (132, 2, Some((4, 16))));
        assert!(both.covers(&a).is_ok() && both.covers(&b).is_ok());
        let team = Team { nranks: 8, rank: 3, stride: 1 };
        let with_team = a.clone().team(team, true).merge(&Requirements::new().team(team, true));
        assert_eq!(with_team.teams, vec![(team, true)], "merging keeps one entry per team");
        let err = a.covers(&b).unwrap_err().to_string();
        assert!(err.contains("8 LSA barriers") && err.contains("needs 132"), "{err}");
    }

    #[test]
    fn resource_buffers_must_lay_out_without_overflow() {
        assert!(check_resource_layout(&[(4096, 256), (128, 0), (1, 128)]).is_ok());
        let huge = check_resource_layout(&[(64, 128), (usize::MAX - 100, 128)]).unwrap_err().to_string();
        assert!(huge.contains("add up past"), "{huge}");
        let odd = check_resource_layout(&[(64, 96)]).unwrap_err().to_string();
        assert!(odd.contains("not a power of two"), "{odd}");
    }

    #[test]
    fn teams_have_no_public_fields_to_forge() {
        // Only NCCL's reports become teams (from_raw); the accessors read them back.
        let team = Team::from_raw(sys::ncclTeam_t { nRanks: 4, rank: 1, stride: 2 });
        assert_eq!((team.nranks(), team.rank(), team.stride()), (4, 1, 2));
        assert_eq!(team.raw().nRanks, 4);
    }

    #[test]
    fn features_newer_than_the_library_are_unsupported() {
        let abi = |major, minor, patch| Abi::for_release(Version::new(major, minor, patch)).unwrap();
        let req = Requirements::new().world_gin_barriers(1);
        assert!(matches!(req.check_version(&abi(2, 29, 7)), Err(Error::Unsupported { .. })));
        assert!(req.check_version(&abi(2, 30, 7)).is_ok());
        // 2.29.2's requirements stop before ginConnectionType.
        let connection = Requirements::new().gin_connection(GinConnectionType::Rail);
        assert!(matches!(connection.check_version(&abi(2, 29, 3)), Err(Error::Unsupported { .. })));
        assert!(connection.check_version(&abi(2, 29, 7)).is_ok());
    }
}
