//! Where the ranks of a job run, and what several ranks on one GPU need.
//!
//! A [`Placement`] maps rank `i` to a CUDA device. One rank per GPU is the default; more ranks than GPUs put
//! several ranks on one GPU, which NCCL allows from 2.30 on when `NCCL_MULTI_RANK_GPU_ENABLE=1` is set. Ranks that
//! share a GPU share its multiprocessors and its CUDA context: docs/multi-rank.md says what that asks of kernels
//! (their blocks must fit next to their peers') and of host code (nothing may wait for the whole device).

use crate::config::Config;
use crate::error::Error;
use crate::version::Version;

/// The environment variable that sets how many ranks the examples, benchmarks and GPU tests run
/// ([`Placement::from_env`]).
pub const RANKS_VARIABLE: &str = "WEFT_RANKS";

/// The environment variable a process sets when it runs one rank and shares its GPU with ranks in other
/// processes: how many ranks of each communicator run on its GPU ([`Communicator::ranks_on_gpu`]).
///
/// [`Communicator::ranks_on_gpu`]: crate::Communicator::ranks_on_gpu
pub const RANKS_PER_GPU_VARIABLE: &str = "WEFT_RANKS_PER_GPU";

/// NCCL's switch for several ranks of one communicator on one GPU (NCCL ≥ 2.30, experimental).
pub const NCCL_MULTI_RANK_VARIABLE: &str = "NCCL_MULTI_RANK_GPU_ENABLE";

/// The first NCCL release that lets several ranks of one communicator share a GPU.
pub const MULTI_RANK_GPU_NCCL: Version = Version::new(2, 30, 0);

/// Most CTAs each NCCL kernel may use when ranks share a GPU, unless the configuration says otherwise. Every rank
/// on a GPU runs its own NCCL channels; with NCCL's default (up to 32 and more per rank) eight ranks' collectives
/// would ask for more blocks than a GPU holds next to each other. 4 per rank ran 1 to 8 ranks on an H200 with NCCL
/// 2.30.7 (docs/multi-rank.md).
pub const SHARED_GPU_MAX_CTAS: i32 = 4;

/// CUDA's variable for the number of hardware work queues of each context (8 when unset, at most 32): ranks that
/// are threads of one process and share a GPU need [`SHARED_GPU_QUEUES`] (docs/multi-rank.md, "Hardware queues").
/// CUDA reads it when it sets a context up, so it must be in the process's environment before its first CUDA call:
/// `CUDA_DEVICE_MAX_CONNECTIONS=32 WEFT_RANKS=8 cargo run …`. weft does not set it itself: changing the environment
/// of a running process races with any thread reading it (the CUDA driver's and NCCL's included).
pub const QUEUES_VARIABLE: &str = "CUDA_DEVICE_MAX_CONNECTIONS";

/// The hardware queues ranks that share a GPU as threads of one process need: the most CUDA gives a context.
/// Streams of different ranks that share a queue can deadlock: a rank's work enqueued ahead of a peer's waits for
/// that peer's work queued behind it. With CUDA's 8, the CUDA graph test at 8 ranks and the fused benchmark's
/// `zero_adam` at 4 stopped now and then on an H100 with NCCL 2.30.7; with 1 queue both stopped every time, even at 2
/// ranks; with 32, none of 10 runs did (2026-12-05).
pub const SHARED_GPU_QUEUES: usize = 32;

/// NCCL's variable for how the ranks of one process launch their kernels: `PARALLEL` (NCCL's default), each rank's
/// thread on its own, or `GROUP`, all of them in lock step. Ranks that share a GPU as threads of one process need
/// `GROUP` wherever their launches wait for each other (docs/multi-rank.md, "Launch mode"): with `PARALLEL`, a rank's
/// launch can queue on the GPU behind a peer's wait for that peer's own kernel, which waits for this rank's. The
/// fused benchmark's `zero_adam` at 8 ranks on one H100 (NCCL 2.30.7, quick mode) stopped that way in 18 of 24 runs
/// with `PARALLEL` (2026-12-05 and 06), and in 1 of 32 with `GROUP`: in a batch of weft's own kernels, which the
/// benchmark has enqueued in step since (9 runs, none stopped; "Hardware queues" there). weft reads the variable and
/// does not set it, for the reason given at [`QUEUES_VARIABLE`]; [`spmd`](crate::spmd()) and
/// [`Communicator::sharing_gpu_in`] gate the launches under it (`GROUP`'s own wait inside NCCL has no timeout).
///
/// [`Communicator::sharing_gpu_in`]: crate::Communicator::sharing_gpu_in
pub const LAUNCH_MODE_VARIABLE: &str = "NCCL_LAUNCH_MODE";

/// Whether NCCL launches the ranks of this process in lock step: `NCCL_LAUNCH_MODE=GROUP` (any case, as NCCL
/// compares it) in the environment, where NCCL also puts what its `nccl.conf` files set.
pub fn launches_in_step() -> bool {
    launches_in_step_with(std::env::var(LAUNCH_MODE_VARIABLE).ok().as_deref())
}

fn launches_in_step_with(value: Option<&str>) -> bool {
    value.is_some_and(|value| value.eq_ignore_ascii_case("GROUP"))
}

/// Warns once per process (`tracing`) when `ranks` ranks share `device` as threads of this process while NCCL
/// launches them each on its own (see [`LAUNCH_MODE_VARIABLE`]). A warning, not an error: `GROUP` asks every rank of
/// the process to take part in every launch, which programs with one-sided or partial point-to-point traffic do
/// not, and programs whose ranks launch in step run either way.
pub(crate) fn note_launch_mode(ranks: usize, device: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if ranks > 1 && !launches_in_step() {
        ONCE.call_once(|| {
            tracing::warn!(
                ranks,
                device,
                "ranks share a GPU as threads of this process and {LAUNCH_MODE_VARIABLE} is not GROUP: a rank's NCCL \
                 launch can then queue on the GPU behind a peer's wait and stop every rank (docs/multi-rank.md, \
                 \"Launch mode\"); start the process with {LAUNCH_MODE_VARIABLE}=GROUP if every rank takes part in \
                 every collective"
            );
        });
    }
}

/// Rank `i` of a job runs on CUDA device `devices()[i]`.
///
/// ```
/// # use weft_host::placement::Placement;
/// let placement = Placement::new(vec![0, 0, 1, 1]).unwrap();
/// assert_eq!((placement.nranks(), placement.ranks_on_gpu(2), placement.max_ranks_per_gpu()), (4, 2, 2));
/// assert!(placement.shares_gpus());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    devices: Vec<usize>,
}

impl Placement {
    /// Rank `i` on `devices[i]`; a device may appear several times (ranks sharing that GPU). Fails on an empty
    /// list. Devices are checked against the machine when a communicator is made on them.
    pub fn new(devices: Vec<usize>) -> Result<Placement, Error> {
        if devices.is_empty() {
            return Err(Error::invalid("devices", "place at least one rank (list at least one CUDA device)"));
        }
        Ok(Placement { devices })
    }

    /// One rank per visible GPU.
    pub fn one_per_gpu() -> Result<Placement, Error> {
        Placement::ranks(crate::cuda::device_count()?)
    }

    /// `nranks` ranks over the visible GPUs: one per GPU on the first `nranks` GPUs when there are enough, else
    /// consecutive ranks share a GPU and the GPUs hold as even a share as possible (8 ranks on 1 GPU: all on
    /// device 0; 6 ranks on 4 GPUs: 2, 1, 2, 1).
    pub fn ranks(nranks: usize) -> Result<Placement, Error> {
        Placement::spread(nranks, crate::cuda::device_count()?)
    }

    /// [`Placement::ranks`] on a machine with `gpus` GPUs.
    pub fn spread(nranks: usize, gpus: usize) -> Result<Placement, Error> {
        if nranks == 0 {
            return Err(Error::invalid("nranks", "place at least one rank"));
        }
        if gpus == 0 {
            return Err(Error::invalid("gpus", "no CUDA device is visible to this process: ranks need a GPU"));
        }
        let devices =
            if nranks <= gpus { (0..nranks).collect() } else { (0..nranks).map(|r| r * gpus / nranks).collect() };
        Placement::new(devices)
    }

    /// The placement the examples, benchmarks and GPU tests use: `WEFT_RANKS=n` ranks spread over the visible
    /// GPUs ([`Placement::ranks`]), or one rank per GPU when it is unset. A value that is not a positive integer
    /// is an error naming it.
    pub fn from_env() -> Result<Placement, Error> {
        match ranks_from_env(std::env::var(RANKS_VARIABLE).ok().as_deref())? {
            Some(nranks) => Placement::ranks(nranks),
            None => Placement::one_per_gpu(),
        }
    }

    /// The device of each rank, in rank order (what [`spmd`](crate::spmd()) takes).
    pub fn devices(&self) -> &[usize] {
        &self.devices
    }

    /// The number of ranks.
    pub fn nranks(&self) -> usize {
        self.devices.len()
    }

    /// The CUDA device of `rank`.
    pub fn device(&self, rank: usize) -> Option<usize> {
        self.devices.get(rank).copied()
    }

    /// How many ranks run on `rank`'s GPU, `rank` included (0 for a rank that does not exist).
    pub fn ranks_on_gpu(&self, rank: usize) -> usize {
        self.device(rank).map_or(0, |device| self.devices.iter().filter(|&&d| d == device).count())
    }

    /// The most ranks on any one GPU.
    pub fn max_ranks_per_gpu(&self) -> usize {
        (0..self.nranks()).map(|rank| self.ranks_on_gpu(rank)).max().unwrap_or(0)
    }

    /// Whether some GPU holds more than one rank.
    pub fn shares_gpus(&self) -> bool {
        self.max_ranks_per_gpu() > 1
    }

    /// Whether the loaded NCCL runs this placement: several ranks on one GPU need NCCL ≥ 2.30 and
    /// `NCCL_MULTI_RANK_GPU_ENABLE=1`. Checked before NCCL is asked, whose own refusal does not say why.
    pub fn check_supported(&self, found: Version) -> Result<(), Error> {
        match self.busiest_gpu() {
            Some((ranks, device)) => check_sharing(ranks, device, found),
            None => Ok(()),
        }
    }

    /// The GPU holding the most ranks: (its rank count, its device); `None` without ranks.
    fn busiest_gpu(&self) -> Option<(usize, usize)> {
        let rank = (0..self.nranks()).max_by_key(|&rank| self.ranks_on_gpu(rank))?;
        Some((self.ranks_on_gpu(rank), self.devices[rank]))
    }

    /// [`note_launch_mode`] for the placement's busiest GPU (ranks that are threads of this process).
    pub(crate) fn note_launch_mode(&self) {
        if let Some((ranks, device)) = self.busiest_gpu() {
            note_launch_mode(ranks, device);
        }
    }

    /// Whether CUDA gives ranks of this placement that are threads of this process enough hardware queues: each GPU
    /// with several ranks needs [`SHARED_GPU_QUEUES`] ([`Error::TooFewQueues`] otherwise).
    pub(crate) fn check_queues(&self) -> Result<(), Error> {
        (0..self.nranks()).try_for_each(|rank| check_queues(self.ranks_on_gpu(rank), self.devices[rank]))
    }

    /// One [`LocalGroup`] per GPU, indexed by rank: the ranks on a GPU share theirs. For ranks that are threads of
    /// this process ([`Communicator::sharing_gpu_in`](crate::Communicator::sharing_gpu_in)).
    pub fn local_groups(&self) -> Vec<std::sync::Arc<LocalGroup>> {
        let mut groups: Vec<std::sync::Arc<LocalGroup>> = Vec::with_capacity(self.nranks());
        for rank in 0..self.nranks() {
            let first = self.devices.iter().position(|&d| d == self.devices[rank]).unwrap_or(rank);
            let group = if first < rank { groups[first].clone() } else { LocalGroup::new(self.ranks_on_gpu(rank)) };
            groups.push(group);
        }
        groups
    }

    /// Describes the placement for logs: `8 ranks on 1 GPU (8 per GPU)`.
    pub fn describe(&self) -> String {
        let mut gpus = self.devices.clone();
        gpus.sort_unstable();
        gpus.dedup();
        let per_gpu = self.max_ranks_per_gpu();
        let ranks = if self.nranks() == 1 { "rank" } else { "ranks" };
        let on = if gpus.len() == 1 { "GPU" } else { "GPUs" };
        if per_gpu > 1 {
            format!("{} {ranks} on {} {on} (up to {per_gpu} per GPU, sharing its SMs)", self.nranks(), gpus.len())
        } else {
            format!("{} {ranks} on {} {on} (one per GPU)", self.nranks(), gpus.len())
        }
    }
}

/// `WEFT_RANKS`'s value: `None` when unset or empty, the number when it is a positive integer.
pub(crate) fn ranks_from_env(value: Option<&str>) -> Result<Option<usize>, Error> {
    positive_from_env(RANKS_VARIABLE, value, "the number of ranks to run, e.g. WEFT_RANKS=4")
}

fn positive_from_env(variable: &'static str, value: Option<&str>, meaning: &str) -> Result<Option<usize>, Error> {
    let Some(text) = value.map(str::trim).filter(|t| !t.is_empty()) else { return Ok(None) };
    match text.parse::<usize>() {
        Ok(n) if n > 0 => Ok(Some(n)),
        _ => Err(Error::invalid(variable, format!("is `{text}`; it must be a positive integer: {meaning}"))),
    }
}

/// The ranks-per-GPU count a communicator initialised on its own assumes: `WEFT_RANKS_PER_GPU`, else 1.
pub(crate) fn ranks_per_gpu_from_env() -> Result<usize, Error> {
    let value = std::env::var(RANKS_PER_GPU_VARIABLE).ok();
    Ok(positive_from_env(
        RANKS_PER_GPU_VARIABLE,
        value.as_deref(),
        "how many ranks of the communicator share this process's GPU, e.g. WEFT_RANKS_PER_GPU=2",
    )?
    .unwrap_or(1))
}

/// Whether NCCL's multi-rank-per-GPU switch is on in this process's environment.
pub fn multi_rank_gpu_enabled() -> bool {
    std::env::var(NCCL_MULTI_RANK_VARIABLE).is_ok_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n != 0))
}

/// Refuses `ranks` ranks on `device` when the loaded NCCL cannot run them there.
pub(crate) fn check_sharing(ranks: usize, device: usize, found: Version) -> Result<(), Error> {
    check_sharing_with(ranks, device, found, multi_rank_gpu_enabled())
}

fn check_sharing_with(ranks: usize, device: usize, found: Version, enabled: bool) -> Result<(), Error> {
    if ranks <= 1 || (found.at_least(MULTI_RANK_GPU_NCCL) && enabled) {
        return Ok(());
    }
    Err(Error::GpuSharing { ranks, device, needs: MULTI_RANK_GPU_NCCL, found, enabled })
}

/// Refuses `ranks` ranks that are threads of this process on `device` when CUDA was asked for fewer hardware queues
/// than [`SHARED_GPU_QUEUES`] ([`Error::TooFewQueues`]).
pub(crate) fn check_queues(ranks: usize, device: usize) -> Result<(), Error> {
    check_queues_with(ranks, device, std::env::var(QUEUES_VARIABLE).ok().as_deref())
}

fn check_queues_with(ranks: usize, device: usize, value: Option<&str>) -> Result<(), Error> {
    if ranks <= 1 {
        return Ok(());
    }
    let text = value.map(str::trim).unwrap_or("");
    match text.parse::<usize>() {
        Ok(queues) if queues >= SHARED_GPU_QUEUES => Ok(()),
        _ => Err(Error::TooFewQueues { ranks, device, found: text.to_string(), needs: SHARED_GPU_QUEUES }),
    }
}

/// `config` for a rank that shares its GPU with `ranks_on_gpu - 1` others: NCCL's CTAs per kernel capped at
/// [`SHARED_GPU_MAX_CTAS`] (and the minimum at 1) where the configuration leaves them to NCCL. One rank per GPU
/// keeps `config` as it is.
pub fn shared_gpu_config(config: &Config, ranks_on_gpu: usize) -> Config {
    if ranks_on_gpu <= 1 {
        return config.clone();
    }
    let mut config = config.clone();
    if !config.sets_max_ctas() {
        config = config.max_ctas(SHARED_GPU_MAX_CTAS);
    }
    if !config.sets_min_ctas() {
        config = config.min_ctas(1);
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_spread_evenly_and_consecutively() {
        let devices = |n, g| Placement::spread(n, g).unwrap().devices().to_vec();
        assert_eq!(devices(1, 1), [0]);
        assert_eq!(devices(8, 1), [0; 8]);
        assert_eq!(devices(2, 8), [0, 1]);
        assert_eq!(devices(8, 8), [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(devices(4, 2), [0, 0, 1, 1]);
        assert_eq!(devices(6, 4), [0, 0, 1, 2, 2, 3]);
        let p = Placement::spread(6, 4).unwrap();
        assert_eq!((p.ranks_on_gpu(0), p.ranks_on_gpu(2), p.max_ranks_per_gpu()), (2, 1, 2));
        assert!(Placement::spread(0, 1).is_err());
        assert!(Placement::spread(2, 0).is_err());
        assert!(Placement::new(Vec::new()).is_err());
        assert!(!Placement::spread(4, 8).unwrap().shares_gpus());
        assert_eq!(Placement::spread(8, 1).unwrap().describe(), "8 ranks on 1 GPU (up to 8 per GPU, sharing its SMs)");
        assert_eq!(Placement::spread(2, 2).unwrap().describe(), "2 ranks on 2 GPUs (one per GPU)");
        assert_eq!(Placement::spread(4, 2).unwrap().ranks_on_gpu(9), 0);
        let groups = Placement::new(vec![0, 1, 0, 1, 1]).unwrap().local_groups();
        assert!(std::sync::Arc::ptr_eq(&groups[0], &groups[2]) && std::sync::Arc::ptr_eq(&groups[1], &groups[4]));
        assert!(!std::sync::Arc::ptr_eq(&groups[0], &groups[1]));
        assert_eq!((groups[0].size(), groups[1].size()), (2, 3));
    }

    #[test]
    fn the_ranks_variable_takes_positive_integers_only() {
        assert_eq!(ranks_from_env(None).unwrap(), None);
        assert_eq!(ranks_from_env(Some("")).unwrap(), None);
        assert_eq!(ranks_from_env(Some(" 8 ")).unwrap(), Some(8));
        for bad in ["0", "-2", "four", "2.5"] {
            let error = ranks_from_env(Some(bad)).unwrap_err().to_string();
            assert!(
                error.contains("WEFT_RANKS") && error.contains(bad) && error.contains("positive integer"),
                "{error}"
            );
        }
    }

    #[test]
    fn sharing_a_gpu_needs_nccl_2_30_and_the_switch_and_the_error_names_both() {
        let old = Version::new(2, 28, 9);
        let new = Version::new(2, 30, 7);
        assert!(check_sharing_with(1, 0, old, false).is_ok(), "one rank per GPU always runs");
        assert!(check_sharing_with(8, 0, new, true).is_ok());
        for (found, enabled) in [(old, false), (old, true), (new, false)] {
            let error = check_sharing_with(4, 0, found, enabled).unwrap_err();
            assert!(matches!(error, Error::GpuSharing { ranks: 4, device: 0, .. }), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("2.30") && text.contains("NCCL_MULTI_RANK_GPU_ENABLE=1"), "{text}");
            assert!(text.contains(&found.to_string()), "{text}");
        }
    }

    #[test]
    fn ranks_sharing_a_gpu_in_a_process_need_32_queues_and_the_error_names_the_variable() {
        assert!(check_queues_with(1, 0, None).is_ok(), "one rank never shares a queue with a peer");
        assert!(check_queues_with(1, 0, Some("1")).is_ok());
        assert!(check_queues_with(8, 0, Some("32")).is_ok());
        assert!(check_queues_with(2, 0, Some(" 32 ")).is_ok());
        for (value, shown) in
            [(None, "unset"), (Some(""), "unset"), (Some("8"), "`8`"), (Some("1"), "`1`"), (Some("many"), "`many`")]
        {
            let error = check_queues_with(4, 1, value).unwrap_err();
            assert!(matches!(error, Error::TooFewQueues { ranks: 4, device: 1, needs: 32, .. }), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("CUDA_DEVICE_MAX_CONNECTIONS=32") && text.contains(shown), "{text}");
        }
    }

    #[test]
    fn only_group_in_any_case_launches_in_step() {
        for (value, in_step) in
            [(Some("GROUP"), true), (Some("group"), true), (Some("Group"), true), (Some("PARALLEL"), false)]
        {
            assert_eq!(launches_in_step_with(value), in_step, "{value:?}");
        }
        // NCCL compares the whole value (strcasecmp): no trimming, and unset or empty is PARALLEL.
        for value in [None, Some(""), Some(" GROUP"), Some("GROUPS")] {
            assert!(!launches_in_step_with(value), "{value:?}");
        }
    }

    #[test]
    fn shared_gpus_cap_nccl_ctas_unless_the_config_sets_them() {
        let base = Config::new().comm_name("t");
        assert_eq!(shared_gpu_config(&base, 1), base);
        let shared = shared_gpu_config(&base, 4);
        assert_eq!(shared, base.clone().max_ctas(SHARED_GPU_MAX_CTAS).min_ctas(1));
        let chosen = base.clone().max_ctas(16);
        assert_eq!(shared_gpu_config(&chosen, 4), chosen.clone().min_ctas(1));
    }
}

/// The ranks of one communicator that share a GPU *and this process* (threads), lined up after each collective
/// setup call.
///
/// Such ranks share one CUDA context. A collective setup call (communicator init, window registration, device
/// communicator creation) returns in each rank when that rank is done with it, and some ranks are done before
/// others: a fast rank may launch a kernel that waits at a barrier for a slow rank, while the slow rank is still
/// inside the call and, with peers mapped, may wait for the whole device there. That deadlock was seen on an H200
/// with NCCL 2.30.7 at 4 ranks (docs/multi-rank.md). So after each such call weft waits until every rank of the
/// group has returned from it before any of them goes on. [`spmd`](crate::spmd()) and `init_all` make the groups;
/// threads of your own join one with [`Communicator::sharing_gpu_in`](crate::Communicator::sharing_gpu_in).
#[derive(Debug)]
pub struct LocalGroup {
    size: usize,
    /// The round, the ranks arrived in it, and what they brought to it ([`exchange`](Self::exchange)).
    state: std::sync::Mutex<Round>,
    turn: std::sync::Condvar,
    /// The first rank that left the group for good (its communicator aborted, revoked or finalized): no round can
    /// complete after that, so a meeting fails at once instead of waiting out its timeout.
    left: std::sync::OnceLock<(usize, &'static str)>,
    /// The rosters of the communicators initialised in this group, by unique id ([`roster_for`](Self::roster_for)).
    rosters: Keyed<Roster>,
}

/// One round of a [`LocalGroup`]'s meetings.
#[derive(Debug, Default)]
struct Round {
    number: u64,
    arrived: usize,
    /// The values brought to this round by [`LocalGroup::exchange`].
    brought: Vec<u64>,
    /// The values of the last round that completed: its ranks read them before any of them can complete another.
    last: Vec<u64>,
}

/// Shared objects by key, held by their users: the first to ask for a key makes it, the others get the same one
/// while anybody holds it.
#[derive(Debug)]
struct Keyed<T>(std::sync::Mutex<Vec<(Vec<u8>, std::sync::Weak<T>)>>);

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Keyed(std::sync::Mutex::new(Vec::new()))
    }
}

impl<T> Keyed<T> {
    fn get_or(&self, key: &[u8], make: impl FnOnce() -> T) -> std::sync::Arc<T> {
        let mut entries = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        entries.retain(|(_, entry)| entry.strong_count() > 0);
        if let Some(entry) = entries.iter().find(|(k, _)| k == key).and_then(|(_, entry)| entry.upgrade()) {
            return entry;
        }
        let entry = std::sync::Arc::new(make());
        entries.push((key.to_vec(), std::sync::Arc::downgrade(&entry)));
        entry
    }
}

/// The ranks of one communicator that are threads of this process and took part in its creation together: the
/// ranks of an [`spmd`](crate::spmd()) job, or those that initialised it through one [`LocalGroup`]
/// ([`Communicator::sharing_gpu_in`](crate::Communicator::sharing_gpu_in)). It knows each one's rank and GPU, holds
/// the launch gate they meet at under `NCCL_LAUNCH_MODE=GROUP` (docs/multi-rank.md, "Launch mode"), and derives
/// the rosters of the communicators split or shrunk from it: their line-up groups (one per GPU) and their gates.
#[derive(Debug)]
pub(crate) struct Roster {
    /// The GPU of each member, in no particular order.
    census: Vec<usize>,
    /// (rank, GPU) of each member that has enrolled, at most the census.
    members: std::sync::Mutex<Vec<(usize, usize)>>,
    /// All the members: the launch gate, and where a split's members tell each other their colors.
    gate: LocalGroup,
    /// The rosters of the communicators made from this one, by how ([`split`](Self::split), [`shrink`](Self::shrink)).
    children: Keyed<Roster>,
    /// The members on each GPU, lined up after setup calls ([`group_on`](Self::group_on)).
    groups: Keyed<LocalGroup>,
}

impl Roster {
    /// The roster of members on the GPUs of `census` (one entry per member), none enrolled yet.
    pub(crate) fn new(census: Vec<usize>) -> Roster {
        Roster {
            members: std::sync::Mutex::new(Vec::with_capacity(census.len())),
            gate: LocalGroup::new_inner(census.len()),
            census,
            children: Keyed::default(),
            groups: Keyed::default(),
        }
    }

    /// Records that `rank` runs on GPU `device` (again: no change).
    pub(crate) fn enrol(&self, rank: usize, device: usize) {
        let mut members = self.members.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !members.iter().any(|&(r, _)| r == rank) {
            members.push((rank, device));
        }
    }

    /// The gate of every member (the launch gate under `NCCL_LAUNCH_MODE=GROUP`).
    pub(crate) fn gate(&self) -> &LocalGroup {
        &self.gate
    }

    /// Whether its members must meet at the gate before each launch: there are several, and NCCL launches them in
    /// lock step ([`launches_in_step`]).
    pub(crate) fn gates_launches(&self) -> bool {
        self.gate.size() > 1 && launches_in_step()
    }

    /// The members on GPU `device`, as a group that lines up after collective setup calls; `None` where only one
    /// is there (nothing to line up with).
    pub(crate) fn group_on(&self, device: usize) -> Option<std::sync::Arc<LocalGroup>> {
        let here = self.census.iter().filter(|&&d| d == device).count();
        (here > 1).then(|| self.groups.get_or(&device.to_le_bytes(), || LocalGroup::new_inner(here)))
    }

    /// The roster of the communicator that `ncclCommSplit` number `seq` (counted on the parent communicator) gives
    /// this member with `color` (`None`: it opts out and gets none) on GPU `device`. Every member calls it, as every
    /// rank calls the split: they tell each other their colors over the gate, which ends in [`Error::PeerFailed`]
    /// or [`Error::Stalled`] as a launch there would. The members of the child enrol once NCCL told them their ranks.
    pub(crate) fn split(
        &self,
        seq: u64,
        color: Option<u32>,
        device: usize,
        timeout: std::time::Duration,
    ) -> Result<Option<std::sync::Arc<Roster>>, Error> {
        // u32::MAX marks "no color" (a color is at most i32::MAX), the device the low half.
        let mine = (u64::from(color.unwrap_or(u32::MAX)) << 32) | (device as u64 & 0xffff_ffff);
        let colors = self.gate.exchange(mine, "a communicator split", timeout)?;
        let Some(color) = color else { return Ok(None) };
        let census = colors.iter().filter(|&&v| (v >> 32) as u32 == color).map(|&v| (v & 0xffff_ffff) as usize);
        let key = [b"split".as_slice(), &seq.to_le_bytes(), &color.to_le_bytes()].concat();
        Ok(Some(self.children.get_or(&key, || Roster::new(census.collect()))))
    }

    /// The roster of the communicator that `ncclCommShrink` number `seq` (counted on the parent communicator) leaves
    /// without the ranks in `exclude`: every enrolled member not excluded (its gate, its line-up groups). `None` where
    /// the members are not all enrolled.
    pub(crate) fn shrink(&self, seq: u64, exclude: &[usize]) -> Option<std::sync::Arc<Roster>> {
        let members = self.members.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if members.len() != self.census.len() {
            return None;
        }
        let stay = members.iter().filter(|&&(rank, _)| !exclude.contains(&rank)).map(|&(_, device)| device);
        let mut gone: Vec<_> = exclude.to_vec();
        gone.sort_unstable();
        let mut key = [b"shrink".as_slice(), &seq.to_le_bytes()].concat();
        key.extend(gone.iter().flat_map(|&rank| (rank as u64).to_le_bytes()));
        Some(self.children.get_or(&key, || Roster::new(stay.collect())))
    }
}

/// How long a rank waits for the others of its [`LocalGroup`] after a setup call before giving up with
/// [`Error::Stalled`]: they return from the same collective call, so seconds apart at most.
pub const LINE_UP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

impl LocalGroup {
    /// A group of `size` ranks (threads of this process on one GPU).
    pub fn new(size: usize) -> std::sync::Arc<LocalGroup> {
        std::sync::Arc::new(LocalGroup::new_inner(size))
    }

    fn new_inner(size: usize) -> LocalGroup {
        LocalGroup {
            size: size.max(1),
            state: std::sync::Mutex::new(Round::default()),
            turn: std::sync::Condvar::new(),
            left: std::sync::OnceLock::new(),
            rosters: Keyed::default(),
        }
    }

    /// The roster of the communicator that this group's ranks, on GPU `device`, initialise with unique id `key`: one
    /// per communicator, shared by its ranks while any of them holds it, so that a rank leaving one communicator's
    /// gate ([`leave`](Self::leave)) leaves no other's.
    pub(crate) fn roster_for(&self, key: &[u8], device: usize) -> std::sync::Arc<Roster> {
        self.rosters.get_or(key, || Roster::new(vec![device; self.size]))
    }

    /// Records that `rank` left the group for good (`how`: "aborted its communicator"), and wakes the ranks waiting
    /// in it: their meetings, and every later one, end in [`Error::PeerFailed`] naming it.
    pub(crate) fn leave(&self, rank: usize, how: &'static str) {
        if self.left.set((rank, how)).is_ok() {
            let _state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.turn.notify_all();
        }
    }

    /// `Err(PeerFailed)` once a rank left the group.
    fn check_left(&self) -> Result<(), Error> {
        match self.left.get() {
            Some(&(rank, how)) => Err(Error::PeerFailed { rank, error: format!("it {how}, so it will never come") }),
            None => Ok(()),
        }
    }

    /// The number of ranks in the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Waits until every rank of the group has called this for the same round; [`Error::Stalled`] after `timeout`
    /// (the rank then withdraws from the round, so the others keep waiting for it, and time out too), or
    /// [`Error::PeerFailed`] as soon as another rank of this thread's [`spmd`](crate::spmd()) job has failed, or a
    /// rank has left the group ([`leave`](Self::leave)): either will never arrive.
    pub(crate) fn line_up(&self, after: &'static str, timeout: std::time::Duration) -> Result<(), Error> {
        self.meet(after, timeout)?;
        if self.size > 1 {
            crate::cuda::note_lined_up();
        }
        Ok(())
    }

    /// [`line_up`](Self::line_up) without noting that this thread lined up with its peers after its work (the
    /// launch gate, which meets before the work: `Communicator::line_up_launch`).
    pub(crate) fn meet(&self, after: &'static str, timeout: std::time::Duration) -> Result<(), Error> {
        self.meet_with(None, after, timeout).map(drop)
    }

    /// [`meet`](Self::meet), each rank bringing `value`: every rank gets all the values brought to the round (in no
    /// particular order). A group of one gets its own.
    pub(crate) fn exchange(
        &self,
        value: u64,
        what: &'static str,
        timeout: std::time::Duration,
    ) -> Result<Vec<u64>, Error> {
        if self.size <= 1 {
            return Ok(vec![value]);
        }
        self.meet_with(Some(value), what, timeout).map(Option::unwrap_or_default)
    }

    fn meet_with(
        &self,
        value: Option<u64>,
        after: &'static str,
        timeout: std::time::Duration,
    ) -> Result<Option<Vec<u64>>, Error> {
        use std::sync::PoisonError;
        if self.size <= 1 {
            return Ok(None);
        }
        let deadline = std::time::Instant::now() + timeout;
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.check_left()?;
        let round = state.number;
        state.arrived += 1;
        state.brought.extend(value);
        // What this rank takes away from a completed round.
        let take = |state: &Round| value.map(|_| state.last.clone());
        if state.arrived == self.size {
            state.number = round + 1;
            state.arrived = 0;
            state.last = std::mem::take(&mut state.brought);
            self.turn.notify_all();
            return Ok(take(&state));
        }
        // Withdraws this rank from the round it gives up on.
        let withdraw = |state: &mut Round| {
            state.arrived -= 1;
            if let Some(at) = value.and_then(|v| state.brought.iter().position(|&b| b == v)) {
                state.brought.swap_remove(at);
            }
        };
        // Woken by the last arrival, or every few milliseconds to look for a failed peer.
        const LOOK: std::time::Duration = std::time::Duration::from_millis(20);
        loop {
            let now = std::time::Instant::now();
            if now >= deadline {
                withdraw(&mut state);
                return Err(Error::Stalled { operation: after, after: timeout });
            }
            if let Err(failed) = crate::spmd::peer_failure().and_then(|()| self.check_left()) {
                withdraw(&mut state);
                return Err(failed);
            }
            state = self.turn.wait_timeout(state, (deadline - now).min(LOOK)).unwrap_or_else(PoisonError::into_inner).0;
            if state.number != round {
                return Ok(take(&state));
            }
        }
    }
}

#[cfg(test)]
mod group_tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_group_lines_up_every_round_and_a_missing_rank_is_a_stall_not_a_hang() {
        let group = LocalGroup::new(4);
        let passed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    for _ in 0..50 {
                        group.line_up("test", Duration::from_secs(10)).unwrap();
                        passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                });
            }
        });
        assert_eq!(passed.into_inner(), 200);

        let group = LocalGroup::new(3);
        let started = Instant::now();
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|_| scope.spawn(|| group.line_up("window registration", Duration::from_millis(100))))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(outcomes.iter().all(|o| matches!(o, Err(Error::Stalled { operation: "window registration", .. }))));
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(LocalGroup::new(1).line_up("alone", Duration::ZERO).is_ok());
    }

    #[test]
    fn each_communicator_gets_its_own_roster_and_gate_shared_by_its_ranks() {
        let group = LocalGroup::new(2);
        let (a, a_again, b) =
            (group.roster_for(&[1; 4], 0), group.roster_for(&[1; 4], 0), group.roster_for(&[2; 4], 0));
        assert!(std::sync::Arc::ptr_eq(&a, &a_again) && !std::sync::Arc::ptr_eq(&a, &b));
        assert_eq!(b.gate().size(), 2);
        a.gate().leave(0, "finalized its communicator");
        assert!(b.gate().check_left().is_ok() && group.check_left().is_ok(), "leaving one gate leaves no other");
        drop((a, a_again));
        let fresh = group.roster_for(&[1; 4], 0);
        assert_eq!(fresh.gate().check_left().map_err(|e| e.to_string()), Ok(()), "a new one once unused");
    }

    /// Runs `body(rank)` on `n` threads at once; the results in rank order.
    fn on_threads<R: Send>(n: usize, body: impl Fn(usize) -> R + Sync) -> Vec<R> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = (0..n)
                .map(|rank| {
                    scope.spawn({
                        let body = &body;
                        move || body(rank)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn an_exchange_gives_every_rank_every_value_round_after_round() {
        let group = LocalGroup::new(4);
        let rounds = on_threads(4, |rank| {
            (0..20u64)
                .map(|round| {
                    let mut got = group.exchange(round * 10 + rank as u64, "test", Duration::from_secs(10)).unwrap();
                    got.sort_unstable();
                    got
                })
                .collect::<Vec<_>>()
        });
        for got in rounds {
            for (round, values) in (0..20u64).zip(got) {
                assert_eq!(values, (0..4).map(|rank| round * 10 + rank).collect::<Vec<_>>());
            }
        }
        // A rank that gives up takes its value back: the round completes later without it.
        let group = LocalGroup::new(2);
        assert!(matches!(group.exchange(7, "test", Duration::from_millis(20)), Err(Error::Stalled { .. })));
        let got = on_threads(2, |rank| group.exchange(rank as u64, "test", Duration::from_secs(10)).unwrap());
        for mut values in got {
            values.sort_unstable();
            assert_eq!(values, [0, 1]);
        }
        assert_eq!(LocalGroup::new(1).exchange(5, "alone", Duration::ZERO).unwrap(), [5]);
    }

    /// A roster of four ranks on GPUs 0, 0, 1, 1, all enrolled.
    fn four_on_two_gpus() -> Roster {
        let roster = Roster::new(vec![0, 0, 1, 1]);
        for rank in 0..4 {
            roster.enrol(rank, rank / 2);
        }
        roster
    }

    #[test]
    fn a_split_gives_the_ranks_of_each_color_one_roster_with_their_gpus() {
        let roster = four_on_two_gpus();
        // Colors 0 1 0 1: each child has one rank on each GPU, so nothing to line up per GPU.
        let children = on_threads(4, |rank| {
            roster.split(0, Some(rank as u32 % 2), rank / 2, Duration::from_secs(10)).unwrap().unwrap()
        });
        assert!(
            std::sync::Arc::ptr_eq(&children[0], &children[2]) && std::sync::Arc::ptr_eq(&children[1], &children[3])
        );
        assert!(!std::sync::Arc::ptr_eq(&children[0], &children[1]));
        assert_eq!(children[0].gate().size(), 2);
        assert!(children[0].group_on(0).is_none() && children[0].group_on(1).is_none());
        // Colors 0 0 1 -: one child of the two ranks on GPU 0, one of one rank, and rank 3 out.
        let children = on_threads(4, |rank| {
            let color = [Some(0), Some(0), Some(1), None][rank];
            roster.split(1, color, rank / 2, Duration::from_secs(10)).unwrap()
        });
        let (pair, alone) = (children[0].clone().unwrap(), children[2].clone().unwrap());
        assert!(std::sync::Arc::ptr_eq(&pair, children[1].as_ref().unwrap()) && children[3].is_none());
        assert_eq!((pair.gate().size(), alone.gate().size()), (2, 1));
        assert_eq!(pair.group_on(0).map(|group| group.size()), Some(2));
        let (a, b) = (pair.group_on(0).unwrap(), pair.group_on(0).unwrap());
        assert!(std::sync::Arc::ptr_eq(&a, &b), "the ranks on one GPU share its group");
        // The same colors in a later split make other rosters.
        let later = on_threads(4, |rank| roster.split(2, Some(0), rank / 2, Duration::from_secs(10)).unwrap().unwrap());
        assert!(!std::sync::Arc::ptr_eq(&later[0], &pair) && later[0].gate().size() == 4);
        assert_eq!(later[0].group_on(1).map(|group| group.size()), Some(2));
    }

    #[test]
    fn a_rank_that_never_splits_is_an_error_for_the_others_not_a_hang() {
        let roster = four_on_two_gpus();
        let started = Instant::now();
        let outcomes = on_threads(3, |rank| roster.split(0, Some(0), rank / 2, Duration::from_millis(200)).map(drop));
        assert!(outcomes.iter().all(|o| matches!(o, Err(Error::Stalled { operation: "a communicator split", .. }))));
        roster.gate().leave(3, "aborted its communicator");
        let outcome = roster.split(1, Some(0), 0, Duration::from_secs(60)).map(drop);
        assert!(matches!(outcome, Err(Error::PeerFailed { rank: 3, .. })), "{outcome:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_shrink_keeps_the_enrolled_ranks_not_excluded() {
        let roster = four_on_two_gpus();
        let (child, again) = (roster.shrink(0, &[3]).unwrap(), roster.shrink(0, &[3]).unwrap());
        assert!(std::sync::Arc::ptr_eq(&child, &again), "the survivors share one roster");
        assert_eq!(child.gate().size(), 3);
        assert_eq!(child.group_on(0).map(|group| group.size()), Some(2));
        assert!(child.group_on(1).is_none(), "one survivor on GPU 1");
        assert!(!std::sync::Arc::ptr_eq(&child, &roster.shrink(1, &[3]).unwrap()), "a later shrink is another");
        assert_eq!(roster.shrink(2, &[2, 0]).unwrap().gate().size(), 2);
        // Where not every rank enrolled, their ranks are not known: no roster.
        let partial = Roster::new(vec![0, 0]);
        partial.enrol(0, 0);
        assert!(partial.shrink(0, &[1]).is_none());
    }

    #[test]
    fn a_rank_that_leaves_ends_the_meetings_of_the_others_at_once() {
        let group = LocalGroup::new(3);
        let started = Instant::now();
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let waiting: Vec<_> =
                (0..2).map(|_| scope.spawn(|| group.meet("a launch", Duration::from_secs(60)))).collect();
            std::thread::sleep(Duration::from_millis(50));
            group.leave(2, "aborted its communicator");
            waiting.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for outcome in outcomes.iter().chain([&group.meet("a later launch", Duration::from_secs(60))]) {
            assert!(
                matches!(outcome, Err(Error::PeerFailed { rank: 2, error }) if error.contains("aborted its communicator")),
                "{outcome:?}"
            );
        }
        assert!(started.elapsed() < Duration::from_secs(5), "the meetings waited {:?}", started.elapsed());
    }
}
