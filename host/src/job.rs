//! The job this process is one rank of, as its launcher describes it: torchrun, Slurm's srun, Open MPI, MPICH /
//! Hydra, or weft's own `WEFT_*` variables. [`Job::from_env`] reads them; [`Job::unique_id`] gives every rank the
//! same NCCL unique id without any networking of weft's own (NCCL's `NCCL_COMM_ID` bootstrap), and
//! [`Communicator::from_env`](crate::Communicator::from_env) puts both together.

use std::fmt;

use crate::error::Error;

/// Which launcher started this process (the first whose variables are present, in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Launcher {
    /// weft's own variables: `WEFT_RANK`, `WEFT_WORLD_SIZE`, `WEFT_LOCAL_RANK`, `WEFT_LOCAL_WORLD_SIZE`,
    /// `WEFT_ROOT` (`host:port`). They override any launcher's.
    Weft,
    /// torchrun (`python -m torch.distributed.run`): `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
    /// `MASTER_ADDR`, `MASTER_PORT`.
    Torchrun,
    /// Slurm's srun: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, `SLURM_NODEID`, `SLURM_STEP_TASKS_PER_NODE`
    /// (or `SLURM_TASKS_PER_NODE`), the first host of `SLURM_STEP_NODELIST` (or `SLURM_JOB_NODELIST`) as the root
    /// unless `MASTER_ADDR` is set.
    Slurm,
    /// Open MPI's mpirun: `OMPI_COMM_WORLD_RANK`, `…_SIZE`, `…_LOCAL_RANK`, `…_LOCAL_SIZE`; the root from
    /// `MASTER_ADDR` / `MASTER_PORT` (MPI itself names none).
    OpenMpi,
    /// MPICH and Hydra: `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`; the root from `MASTER_ADDR`.
    Mpich,
}

impl fmt::Display for Launcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Launcher::Weft => "WEFT_* variables",
            Launcher::Torchrun => "torchrun",
            Launcher::Slurm => "Slurm (srun)",
            Launcher::OpenMpi => "Open MPI (mpirun)",
            Launcher::Mpich => "MPICH / Hydra",
        })
    }
}

/// This process's place in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// Who said so.
    pub launcher: Launcher,
    /// This process's rank, in `0..world_size`.
    pub rank: usize,
    /// Ranks in the job.
    pub world_size: usize,
    /// This process's rank among those on its node, in `0..local_world_size`.
    pub local_rank: usize,
    /// Ranks on this node.
    pub local_world_size: usize,
    /// The host the job's root (rank 0) runs on, if the launcher names one.
    pub root_host: Option<String>,
    /// The port of the launcher's own rendezvous (torchrun's store: `MASTER_PORT`), if any.
    pub root_port: Option<u16>,
    /// `WEFT_COMM_PORT`, if set: the port of NCCL's bootstrap root (see [`Job::comm_id_address`]).
    pub comm_port: Option<u16>,
}

/// The port of NCCL's bootstrap root when neither `WEFT_COMM_PORT` nor a launcher port is known.
pub const DEFAULT_COMM_PORT: u16 = 29_601;

impl Job {
    /// Reads the environment: `Ok(None)` when no launcher's variables are present (a plain process: run ranks over
    /// the local GPUs with [`spmd`](crate::spmd()) instead); an error naming the variable when one is missing,
    /// malformed or inconsistent.
    pub fn from_env() -> Result<Option<Job>, Error> {
        Job::from_vars(|name| std::env::var(name).ok())
    }

    /// [`Job::from_env`] over any source of variables (a table, in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<Job>, Error> {
        let vars = Vars(&get);
        let (launcher, rank, world_size, local_rank, local_world_size, root_host, root_port) = if vars.has("WEFT_RANK")
        {
            let (host, port) = match vars.text("WEFT_ROOT") {
                Some(root) => {
                    let (host, port) = split_host_port("WEFT_ROOT", &root)?;
                    (Some(host), Some(port))
                }
                None => (None, None),
            };
            (
                Launcher::Weft,
                vars.number("WEFT_RANK")?,
                vars.number("WEFT_WORLD_SIZE")?,
                vars.number_or("WEFT_LOCAL_RANK", 0)?,
                vars.number_or("WEFT_LOCAL_WORLD_SIZE", 1)?,
                host,
                port,
            )
        } else if vars.has("RANK") && vars.has("LOCAL_RANK") && vars.has("WORLD_SIZE") {
            (
                Launcher::Torchrun,
                vars.number("RANK")?,
                vars.number("WORLD_SIZE")?,
                vars.number("LOCAL_RANK")?,
                vars.number("LOCAL_WORLD_SIZE")?,
                Some(vars.required("MASTER_ADDR")?),
                Some(vars.port("MASTER_PORT")?),
            )
        } else if vars.has("SLURM_PROCID") {
            let node = vars.number_or("SLURM_NODEID", 0)?;
            let tasks_name = if vars.has("SLURM_STEP_TASKS_PER_NODE") {
                "SLURM_STEP_TASKS_PER_NODE"
            } else {
                "SLURM_TASKS_PER_NODE"
            };
            let tasks = vars.required(tasks_name)?;
            let local_world_size = tasks_on_node(tasks_name, &tasks, node)?;
            let host = match vars.text("MASTER_ADDR") {
                Some(host) => host,
                None => {
                    let list_name =
                        if vars.has("SLURM_STEP_NODELIST") { "SLURM_STEP_NODELIST" } else { "SLURM_JOB_NODELIST" };
                    first_host(list_name, &vars.required(list_name)?)?
                }
            };
            (
                Launcher::Slurm,
                vars.number("SLURM_PROCID")?,
                vars.number("SLURM_NTASKS")?,
                vars.number("SLURM_LOCALID")?,
                local_world_size,
                Some(host),
                vars.optional_port("MASTER_PORT")?,
            )
        } else if vars.has("OMPI_COMM_WORLD_RANK") {
            (
                Launcher::OpenMpi,
                vars.number("OMPI_COMM_WORLD_RANK")?,
                vars.number("OMPI_COMM_WORLD_SIZE")?,
                vars.number("OMPI_COMM_WORLD_LOCAL_RANK")?,
                vars.number("OMPI_COMM_WORLD_LOCAL_SIZE")?,
                vars.text("MASTER_ADDR"),
                vars.optional_port("MASTER_PORT")?,
            )
        } else if vars.has("PMI_RANK") {
            (
                Launcher::Mpich,
                vars.number("PMI_RANK")?,
                vars.number("PMI_SIZE")?,
                vars.number("MPI_LOCALRANKID")?,
                vars.number("MPI_LOCALNRANKS")?,
                vars.text("MASTER_ADDR"),
                vars.optional_port("MASTER_PORT")?,
            )
        } else {
            return Ok(None);
        };
        let comm_port = vars.optional_port("WEFT_COMM_PORT")?;
        let job = Job { launcher, rank, world_size, local_rank, local_world_size, root_host, root_port, comm_port };
        job.check()?;
        Ok(Some(job))
    }

    fn check(&self) -> Result<(), Error> {
        let inconsistent =
            |problem: String| Err(Error::invalid("job environment", format!("{} says {problem}", self.launcher)));
        if self.world_size == 0 {
            return inconsistent("the job has 0 ranks".into());
        }
        if self.rank >= self.world_size {
            return inconsistent(format!(
                "rank {} of {} ranks (a rank must be below the world size)",
                self.rank, self.world_size
            ));
        }
        if self.local_world_size == 0 || self.local_rank >= self.local_world_size {
            return inconsistent(format!(
                "local rank {} of {} local ranks (a local rank must be below the local world size)",
                self.local_rank, self.local_world_size
            ));
        }
        if self.local_world_size > self.world_size {
            return inconsistent(format!(
                "{} ranks on this node but {} in the job",
                self.local_world_size, self.world_size
            ));
        }
        Ok(())
    }

    /// The address of NCCL's bootstrap root for this job, `host:port` (what `NCCL_COMM_ID` is set to): the root
    /// host, and `WEFT_COMM_PORT`, else the launcher's port + 1 (torchrun's store listens on `MASTER_PORT` itself),
    /// else [`DEFAULT_COMM_PORT`]. An error naming `MASTER_ADDR` when the launcher names no root (MPI).
    pub fn comm_id_address(&self) -> Result<String, Error> {
        let host = self.root_host.as_deref().ok_or_else(|| {
            Error::invalid(
                "MASTER_ADDR",
                format!(
                    "{} names no root host: set MASTER_ADDR (and MASTER_PORT) to rank 0's host, or pass a UniqueId you \
                     broadcast yourself (e.g. with MPI) to Communicator::init",
                    self.launcher
                ),
            )
        })?;
        let port = match (self.comm_port, self.root_port) {
            (Some(port), _) => port,
            (None, Some(store)) => store.checked_add(1).ok_or_else(|| {
                Error::invalid("MASTER_PORT", "is 65535: set WEFT_COMM_PORT to the port NCCL's bootstrap may use")
            })?,
            (None, None) => DEFAULT_COMM_PORT,
        };
        Ok(if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") })
    }

    /// The job's NCCL unique id, the same on every rank: NCCL's own bootstrap through `NCCL_COMM_ID` (set to
    /// [`Job::comm_id_address`] unless it is set already); rank 0's initialisation then starts the root there.
    ///
    /// NCCL allows one communicator per `NCCL_COMM_ID` at a time: make further ones with `split`, and not with
    /// `grow` or several ids. This sets a process environment variable: call it before the process starts threads
    /// that read the environment (NCCL's, for one).
    pub fn unique_id(&self) -> Result<crate::UniqueId, Error> {
        if std::env::var_os("NCCL_COMM_ID").is_none() {
            std::env::set_var("NCCL_COMM_ID", self.comm_id_address()?);
        }
        crate::UniqueId::new()
    }

    /// The CUDA device this rank uses among `gpus` visible ones: its local rank, wrapped around when the node runs
    /// more ranks than it has GPUs (those ranks share GPUs: NCCL ≥ 2.30 with `NCCL_MULTI_RANK_GPU_ENABLE=1`).
    pub fn device(&self, gpus: usize) -> usize {
        self.local_rank % gpus.max(1)
    }

    /// How many of this node's ranks use this rank's GPU ([`Job::device`]), this one included.
    pub fn ranks_on_gpu(&self, gpus: usize) -> usize {
        let gpus = gpus.max(1);
        let device = self.device(gpus);
        (0..self.local_world_size).filter(|r| r % gpus == device).count()
    }
}

impl crate::Communicator<crate::Active> {
    /// This process's rank of the job its launcher started ([`Job::from_env`]), initialised on its GPU
    /// ([`Job::device`]) with the job's unique id ([`Job::unique_id`]); `Ok(None)` when no launcher started the
    /// process (run ranks over the local GPUs with [`spmd`](crate::spmd()) then). Blocking: returns once every rank
    /// joined.
    pub fn from_env(config: &crate::Config) -> Result<Option<crate::Communicator<crate::Active>>, Error> {
        match Job::from_env()? {
            Some(job) => Ok(Some(crate::Communicator::from_job(&job, config)?)),
            None => Ok(None),
        }
    }

    /// [`Communicator::from_env`](crate::Communicator::from_env) for a [`Job`] already read.
    pub fn from_job(job: &Job, config: &crate::Config) -> Result<crate::Communicator<crate::Active>, Error> {
        let (uninit, config) = uninit_for::<crate::Blocking>(job, config)?;
        uninit.init(job.world_size, job.rank, &job.unique_id()?, &config)
    }
}

impl crate::Communicator<crate::Active, crate::NonBlocking> {
    /// [`Communicator::from_job`](crate::Communicator::from_job) on a non-blocking communicator: the
    /// initialisation is a [`Pending`](crate::Pending), to be polled or waited for with a deadline.
    pub fn from_job_nonblocking(
        job: &Job,
        config: &crate::Config,
    ) -> Result<crate::Pending<crate::Communicator<crate::Active, crate::NonBlocking>>, Error> {
        let (uninit, config) = uninit_for::<crate::NonBlocking>(job, config)?;
        uninit.init(job.world_size, job.rank, &job.unique_id()?, &config)
    }
}

/// The uninitialised communicator of `job`'s rank on its GPU, told how many of the node's ranks share that GPU, and
/// the configuration for it (NCCL's CTAs capped where ranks share a GPU).
fn uninit_for<M: crate::Mode>(
    job: &Job,
    config: &crate::Config,
) -> Result<(crate::Communicator<crate::Uninit, M>, crate::Config), Error> {
    let gpus = crate::cuda::device_count()?;
    if gpus == 0 {
        return Err(Error::invalid("devices", format!("{job}, but this process sees no CUDA device")));
    }
    let sharing = job.ranks_on_gpu(gpus);
    let uninit = crate::Communicator::<crate::Uninit, M>::uninit_on(job.device(gpus))?.sharing_gpu(sharing)?;
    Ok((uninit, crate::placement::shared_gpu_config(config, sharing)))
}

impl fmt::Display for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {}/{} (local {}/{}) started by {}",
            self.rank, self.world_size, self.local_rank, self.local_world_size, self.launcher
        )?;
        if let Some(host) = &self.root_host {
            write!(f, ", root {host}")?;
        }
        Ok(())
    }
}

struct Vars<'a>(&'a dyn Fn(&str) -> Option<String>);

impl Vars<'_> {
    fn text(&self, name: &str) -> Option<String> {
        (self.0)(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
    }

    fn has(&self, name: &str) -> bool {
        self.text(name).is_some()
    }

    fn required(&self, name: &'static str) -> Result<String, Error> {
        self.text(name).ok_or_else(|| Error::invalid(name, "is not set, but the launcher's other variables are"))
    }

    fn number(&self, name: &'static str) -> Result<usize, Error> {
        let text = self.required(name)?;
        text.parse().map_err(|_| Error::invalid(name, format!("is `{text}`, not a non-negative integer")))
    }

    fn number_or(&self, name: &'static str, default: usize) -> Result<usize, Error> {
        if self.has(name) {
            self.number(name)
        } else {
            Ok(default)
        }
    }

    fn port(&self, name: &'static str) -> Result<u16, Error> {
        let text = self.required(name)?;
        text.parse().map_err(|_| Error::invalid(name, format!("is `{text}`, not a port number (0..=65535)")))
    }

    fn optional_port(&self, name: &'static str) -> Result<Option<u16>, Error> {
        if self.has(name) {
            self.port(name).map(Some)
        } else {
            Ok(None)
        }
    }
}

fn split_host_port(name: &'static str, text: &str) -> Result<(String, u16), Error> {
    let bad = || Error::invalid(name, format!("is `{text}`; write host:port (IPv6 as [addr]:port)"));
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host.to_owned(), port.parse().map_err(|_| bad())?))
}

/// The number of tasks Slurm puts on node `node`, from a tasks-per-node list such as `4(x2),3`.
fn tasks_on_node(name: &'static str, list: &str, node: usize) -> Result<usize, Error> {
    let bad = || Error::invalid(name, format!("is `{list}`; Slurm writes it like `4` or `4(x2),3`"));
    let mut first = 0usize;
    for item in list.split(',') {
        let (count, repeat) = match item.split_once("(x") {
            Some((count, rest)) => {
                (count, rest.strip_suffix(')').ok_or_else(bad)?.parse::<usize>().map_err(|_| bad())?)
            }
            None => (item, 1),
        };
        let count: usize = count.trim().parse().map_err(|_| bad())?;
        if node < first + repeat {
            return Ok(count);
        }
        first += repeat;
    }
    Err(Error::invalid(name, format!("is `{list}`, which lists {first} nodes, but this is node {node} (SLURM_NODEID)")))
}

/// The first host of a Slurm host list such as `gpu[07-09,12],login1`.
fn first_host(name: &'static str, list: &str) -> Result<String, Error> {
    let bad = || Error::invalid(name, format!("is `{list}`; expected a Slurm host list like `node[01-04]`"));
    let first = list.split(',').next().filter(|h| !h.is_empty()).ok_or_else(bad)?;
    let Some((prefix, range)) = first.split_once('[') else {
        return Ok(first.to_owned());
    };
    // The list's first item may be cut at a comma inside the brackets: `gpu[07-09` of `gpu[07-09,12]`.
    let range = range.trim_end_matches(']');
    let start = range.split(['-', ',']).next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
    if !start.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    Ok(format!("{prefix}{start}"))
}

#[cfg(test)]
mod tests;
