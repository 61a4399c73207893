//! Creating communicators: unique ids, `init`, `initialize` (several ids), `init_all`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::pending::Resolve;
use super::{read_identity, Active, Blocking, Communicator, Mode, NonBlocking, Uninit, NULL};
use crate::config::Config;
use crate::error::Error;
use crate::result;
use crate::sys::{self, ncclComm_t, Library};

/// The token every rank of a new communicator must share (`ncclUniqueId`, 128 bytes).
///
/// Rank 0 (or the root of a grow) creates it with [`UniqueId::new`] and sends it to the others out of band:
/// as bytes ([`UniqueId::as_bytes`], [`UniqueId::from_bytes`]), as hex text (`Display` / `FromStr`), or with
/// serde (feature `serde`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct UniqueId {
    bytes: [u8; UniqueId::LEN],
}

impl UniqueId {
    /// Size of the id in bytes (`NCCL_UNIQUE_ID_BYTES`).
    pub const LEN: usize = sys::NCCL_UNIQUE_ID_BYTES as usize;

    /// A fresh id from `ncclGetUniqueId` (this process becomes the bootstrap root).
    pub fn new() -> Result<UniqueId, Error> {
        let library = crate::sys::library()?;
        let raw = result::get_unique_id(library)?;
        Ok(UniqueId::from_raw(&raw))
    }

    /// The id's bytes, to send to the other ranks.
    pub fn as_bytes(&self) -> &[u8; UniqueId::LEN] {
        &self.bytes
    }

    /// An id received from the root. Fails unless `bytes` is exactly [`UniqueId::LEN`] long.
    pub fn from_bytes(bytes: &[u8]) -> Result<UniqueId, Error> {
        let bytes = <[u8; UniqueId::LEN]>::try_from(bytes).map_err(|_| {
            Error::invalid("bytes", format!("a unique id is {} bytes, got {}", UniqueId::LEN, bytes.len()))
        })?;
        Ok(UniqueId { bytes })
    }

    pub(crate) fn from_raw(raw: &sys::ncclUniqueId) -> UniqueId {
        UniqueId { bytes: raw.internal.map(|b| b as u8) }
    }

    pub(crate) fn to_raw(self) -> sys::ncclUniqueId {
        sys::ncclUniqueId { internal: self.bytes.map(|b| b as core::ffi::c_char) }
    }
}

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({}…)", &hex::encode(&self.bytes[..8]))
    }
}

/// Lower-case hex, 256 characters.
impl fmt::Display for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.bytes))
    }
}

impl FromStr for UniqueId {
    type Err = Error;
    fn from_str(text: &str) -> Result<UniqueId, Error> {
        let bytes = hex::decode(text.trim())
            .map_err(|e| Error::invalid("text", format!("a unique id is {} hex digits: {e}", 2 * UniqueId::LEN)))?;
        UniqueId::from_bytes(&bytes)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for UniqueId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_string())
        } else {
            serializer.serialize_bytes(&self.bytes)
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for UniqueId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<UniqueId, D::Error> {
        if deserializer.is_human_readable() {
            let text = <String as serde::Deserialize>::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            let bytes = <Vec<u8> as serde::Deserialize>::deserialize(deserializer)?;
            UniqueId::from_bytes(&bytes).map_err(serde::de::Error::custom)
        }
    }
}

fn cuda_context(device: usize) -> Result<Arc<CudaContext>, Error> {
    crate::cuda::context(device)
}

/// Inside an NCCL group, a call that creates a communicator only queues it: NCCL writes and initialises it when the
/// group ends. A blocking communicator (or a split, shrink or grow, which polls its parent) cannot be handed out
/// before that, so such a call is refused there rather than returning a communicator NCCL has not made yet.
pub(crate) fn refuse_in_group(call: &'static str, fix: &'static str) -> Result<(), Error> {
    if crate::group::in_group() {
        return Err(Error::invalid(
            "self",
            format!("{call} inside an NCCL group would hand out a communicator NCCL creates only when the group ends: {fix}"),
        ));
    }
    Ok(())
}

fn check_rank(nranks: usize, rank: usize) -> Result<i32, Error> {
    if nranks == 0 {
        return Err(Error::invalid("nranks", "a communicator needs at least one rank"));
    }
    if rank >= nranks {
        return Err(Error::invalid("rank", format!("rank {rank} is not below nranks {nranks} (valid: 0..{nranks})")));
    }
    i32::try_from(nranks).map_err(|_| Error::invalid("nranks", format!("{nranks} ranks do not fit in a C int")))
}

impl Communicator<Uninit, Blocking> {
    /// An uninitialised, blocking communicator for CUDA device `device`: nccl4py's null communicator.
    pub fn uninit(device: usize) -> Result<Self, Error> {
        Ok(Communicator::from_parts(NULL, crate::sys::library()?, cuda_context(device)?, None))
    }

    /// Initialises one rank of a blocking communicator on `device`: [`Communicator::uninit`] + [`init`](Communicator::init).
    /// To run several ranks on one GPU, use [`spmd`](crate::spmd()) or say how many share it with
    /// [`Communicator::sharing_gpu`] before [`init`](Communicator::init).
    pub fn init_rank(
        device: usize,
        nranks: usize,
        rank: usize,
        id: &UniqueId,
        config: &Config,
    ) -> Result<Communicator<Active>, Error> {
        Communicator::uninit(device)?.init(nranks, rank, id, config)
    }

    /// One blocking communicator per listed device, all in this process (`ncclCommInitAll`): rank `i` runs on
    /// `devices[i]`. A device listed several times holds several ranks (NCCL ≥ 2.30 with
    /// `NCCL_MULTI_RANK_GPU_ENABLE=1`, else [`Error::GpuSharing`]).
    ///
    /// `ncclCommInitAll` takes no configuration, so NCCL's CTAs per rank are not capped as [`spmd`](crate::spmd())
    /// caps them for ranks sharing a GPU: set `NCCL_MAX_CTAS` (docs/multi-rank.md) when several share one.
    pub fn init_all(devices: &[usize]) -> Result<Vec<Communicator<Active>>, Error> {
        refuse_in_group("Communicator::init_all (ncclCommInitAll)", "call it before opening the group")?;
        let library = crate::sys::library()?;
        let placement = crate::Placement::new(devices.to_vec())?;
        let mut ordinals = Vec::with_capacity(devices.len());
        let mut contexts = Vec::with_capacity(devices.len());
        for &device in devices {
            contexts.push(cuda_context(device)?);
            ordinals.push(
                i32::try_from(device)
                    .map_err(|_| Error::invalid("devices", format!("device {device} is not a C int")))?,
            );
        }
        placement.check_supported(library.version())?;
        placement.check_queues()?;
        placement.note_launch_mode();
        // SAFETY: every ordinal was checked against the device count; repeats were allowed by the check above.
        let raws = unsafe { result::comm_init_all(library, &ordinals) }?;
        // Wrap every handle first so that a failure below aborts them all (Drop).
        let mut comms: Vec<Communicator<Active>> = raws
            .into_iter()
            .zip(contexts)
            .enumerate()
            .map(|(rank, (raw, context))| {
                Communicator::from_parts(raw, library, context, None)
                    .with_ranks_on_gpu_unchecked(placement.ranks_on_gpu(rank))
            })
            .collect();
        for comm in &mut comms {
            let identity = read_identity(library, comm.raw())?;
            comm.set_identity(identity);
        }
        Ok(comms)
    }
}

impl Communicator<Uninit, NonBlocking> {
    /// An uninitialised, non-blocking communicator for CUDA device `device`: its initialisation and every
    /// later transition yield a [`Pending`](super::Pending).
    pub fn uninit_nonblocking(device: usize) -> Result<Self, Error> {
        Ok(Communicator::from_parts(NULL, crate::sys::library()?, cuda_context(device)?, None))
    }
}

impl<M: Mode> Communicator<Uninit, M> {
    /// An uninitialised communicator of mode `M` for CUDA device `device` ([`Communicator::uninit`] and
    /// [`Communicator::uninit_nonblocking`] name the mode).
    pub(crate) fn uninit_on(device: usize) -> Result<Self, Error> {
        Ok(Communicator::from_parts(NULL, crate::sys::library()?, cuda_context(device)?, None))
    }

    /// Records that `ranks` ranks of the communicator about to be initialised run on this GPU, this one included
    /// (threads or processes of one job): launches then give each its share of the GPU
    /// ([`Communicator::ranks_on_gpu`]). Without this, initialisation takes `WEFT_RANKS_PER_GPU`, else 1.
    /// [`spmd`](crate::spmd()) and [`Communicator::init_all`] set it from their device lists.
    pub fn sharing_gpu(self, ranks: usize) -> Result<Self, Error> {
        if ranks == 0 {
            return Err(Error::invalid("ranks", "at least this rank runs on its GPU: pass 1 or more"));
        }
        Ok(self.with_ranks_on_gpu_unchecked(ranks))
    }

    /// [`sharing_gpu`](Communicator::sharing_gpu) for ranks that are threads of this process: `group` holds them
    /// all (one [`LocalGroup`](crate::placement::LocalGroup) per GPU, shared by its ranks' threads), and after each
    /// collective setup call (this init, window registration, device communicator creation) every rank waits for
    /// the others to return from it too. [`spmd`](crate::spmd()) does this for you.
    ///
    /// Such ranks share the GPU's CUDA context and its hardware queues: with fewer than
    /// [`SHARED_GPU_QUEUES`](crate::placement::SHARED_GPU_QUEUES) of them this is [`Error::TooFewQueues`]
    /// (start the process with `CUDA_DEVICE_MAX_CONNECTIONS=32`).
    ///
    /// Under `NCCL_LAUNCH_MODE=GROUP` (docs/multi-rank.md, "Launch mode") NCCL launches every rank of the communicator
    /// in this process in lock step, and the group's ranks also meet before each launch (one meeting per
    /// communicator, told apart by its unique id), so that a rank that never comes is an error for the others rather
    /// than a wait inside NCCL without end: then `group` should hold every rank of the communicator in this process
    /// (as it does where they all share one GPU).
    pub fn sharing_gpu_in(self, group: &Arc<crate::placement::LocalGroup>) -> Result<Self, Error> {
        let device = self.context().ordinal();
        crate::placement::check_queues(group.size(), device)?;
        crate::placement::note_launch_mode(group.size(), device);
        Ok(self.sharing_gpu(group.size())?.with_local_group(Some(group.clone())))
    }

    /// The roster of the communicator about to be initialised with unique id `id`, `rank` enrolled in it: the one
    /// given (`spmd`'s), else its local group's roster for `id`, else none; under `NCCL_LAUNCH_MODE=GROUP` the
    /// roster's gate is its launch gate.
    fn with_roster_for(self, id: &UniqueId, rank: usize) -> Self {
        let device = self.context().ordinal();
        let roster = self.roster().cloned().or_else(|| {
            let group = self.local_group().filter(|group| group.size() > 1)?;
            Some(group.roster_for(&id.bytes, device))
        });
        if let Some(roster) = &roster {
            roster.enrol(rank, device);
        }
        self.with_roster(roster)
    }

    /// The ranks-per-GPU count initialisation will record, checked against what the loaded NCCL allows.
    pub(super) fn settle_ranks_on_gpu(&self) -> Result<usize, Error> {
        let ranks = match self.ranks_on_gpu_given() {
            0 => crate::placement::ranks_per_gpu_from_env()?,
            given => given,
        };
        crate::placement::check_sharing(ranks, self.context().ordinal(), self.library().version())?;
        Ok(ranks)
    }

    /// Initialises this rank of an `nranks`-rank communicator (`ncclCommInitRankConfig`); every rank calls
    /// it with the same `id`. Blocking communicators return once all ranks joined; non-blocking ones return a
    /// [`Pending`](super::Pending) at once.
    pub fn init(
        self,
        nranks: usize,
        rank: usize,
        id: &UniqueId,
        config: &Config,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        let nranks_c = check_rank(nranks, rank)?;
        if M::BLOCKING {
            refuse_in_group("a blocking init", "initialise outside the group, or use a non-blocking communicator")?;
        }
        let ranks_on_gpu = self.settle_ranks_on_gpu()?;
        let this = self.with_roster_for(id, rank);
        let mut raw_config = config.to_raw(this.library().version(), M::BLOCKING)?;
        this.context().bind_to_thread()?;
        // SAFETY: the device's context is current; the config is laid out for the loaded version and outlives
        // the handle (`finish_init` hands it to the communicator: NCCL keeps a pointer to its commName).
        let (raw, progress) = unsafe {
            result::comm_init_rank_config(this.library(), nranks_c, &id.to_raw(), rank as i32, raw_config.as_mut_ptr())
        }?;
        this.finish_init(raw, progress, ranks_on_gpu, raw_config)
    }

    /// Initialises this rank from several unique ids (`ncclCommInitRankScalable`), spreading the bootstrap
    /// over several roots for large jobs. Every rank passes the same ids in the same order.
    pub fn initialize(
        self,
        nranks: usize,
        rank: usize,
        ids: &[UniqueId],
        config: &Config,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        let nranks_c = check_rank(nranks, rank)?;
        if ids.is_empty() {
            return Err(Error::invalid("ids", "pass at least one unique id"));
        }
        if M::BLOCKING {
            refuse_in_group(
                "a blocking initialize",
                "initialise outside the group, or use a non-blocking communicator",
            )?;
        }
        let ranks_on_gpu = self.settle_ranks_on_gpu()?;
        let this = self.with_roster_for(&ids[0], rank);
        let mut raw_ids: Vec<_> = ids.iter().map(|id| id.to_raw()).collect();
        let mut raw_config = config.to_raw(this.library().version(), M::BLOCKING)?;
        this.context().bind_to_thread()?;
        // SAFETY: as in `init`; `raw_ids` outlives the call.
        let (raw, progress) = unsafe {
            result::comm_init_rank_scalable(
                this.library(),
                nranks_c,
                rank as i32,
                &mut raw_ids,
                raw_config.as_mut_ptr(),
            )
        }?;
        this.finish_init(raw, progress, ranks_on_gpu, raw_config)
    }

    fn finish_init(
        self,
        raw: ncclComm_t,
        progress: result::Progress,
        ranks_on_gpu: usize,
        config: crate::config::RawConfig,
    ) -> Result<M::Wrap<Communicator<Active, M>>, Error> {
        let comm: Communicator<Active, M> = Communicator::from_parts(raw, self.library(), self.context().clone(), None)
            .with_ranks_on_gpu_unchecked(ranks_on_gpu)
            .with_local_group(self.local_group().cloned())
            .with_roster(self.roster().cloned())
            .with_init_group()
            .with_config(Some(config));
        let comm = if M::BLOCKING { comm.finish()? } else { comm };
        comm.line_up("communicator initialisation")?;
        Ok(M::wrap(comm, progress))
    }
}

impl<S: super::State, M: Mode> Resolve for Communicator<S, M> {
    fn handles(&self) -> Vec<(&'static Library, ncclComm_t)> {
        if self.raw().is_null() {
            Vec::new()
        } else {
            vec![(self.library(), self.raw())]
        }
    }

    fn awaits_group(&self) -> Result<bool, Error> {
        match self.init_group() {
            Some(group) => match group.failure() {
                Some(error) => Err(error),
                None => Ok(group.is_open()),
            },
            None => Ok(false),
        }
    }

    fn finish(mut self) -> Result<Self, Error> {
        if !self.has_identity() && !self.raw().is_null() {
            let identity = read_identity(self.library(), self.raw())?;
            self.set_identity(identity);
            if let Some(roster) = self.roster() {
                roster.enrol(identity.rank as usize, self.context().ordinal());
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_round_trip_through_bytes_and_hex() {
        let mut bytes = [0u8; UniqueId::LEN];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        let id = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!(id.as_bytes(), &bytes);
        let text = id.to_string();
        assert_eq!(text.len(), 256);
        assert_eq!(text.parse::<UniqueId>().unwrap(), id);
        assert_eq!(UniqueId::from_raw(&id.to_raw()), id);
        assert!(matches!(UniqueId::from_bytes(&bytes[..5]), Err(Error::InvalidArgument { argument: "bytes", .. })));
        assert!("zz".parse::<UniqueId>().is_err());
    }

    #[test]
    fn ranks_are_validated_before_nccl_sees_them() {
        assert!(check_rank(0, 0).is_err());
        let err = check_rank(4, 4).unwrap_err().to_string();
        assert!(err.contains("rank 4 is not below nranks 4"), "{err}");
        assert_eq!(check_rank(4, 3).unwrap(), 4);
    }
}
