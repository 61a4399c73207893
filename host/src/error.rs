//! The one error type of weft-host.

use std::fmt;
use std::time::Duration;

use crate::version::Version;

/// Everything that can go wrong in weft's host runtime.
///
/// NCCL failures keep the result code, NCCL's description of it and the text of `ncclGetLastError`;
/// every other variant says what to change.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// libnccl could not be opened: none of the candidate paths held a loadable NCCL.
    #[error(
        "libnccl could not be loaded (tried: {}); install NCCL (pip install nvidia-nccl-cu13) or set NCCL_HOME \
         to the directory holding lib/libnccl.so.2",
        LoadAttempt::list(tried)
    )]
    LibraryNotFound {
        /// Each path tried and why it failed.
        tried: Vec<LoadAttempt>,
    },

    /// An NCCL call returned an error.
    #[error("{call} failed: {code} ({description}){}", last_error_suffix(last_error))]
    Nccl {
        /// The NCCL function that failed.
        call: &'static str,
        /// The result code.
        code: ResultCode,
        /// `ncclGetErrorString` of the code.
        description: String,
        /// `ncclGetLastError` right after the failure (often the only useful detail); empty if NCCL gave none.
        last_error: String,
    },

    /// The loaded libnccl is too old for this call.
    #[error("{call} needs NCCL {needs} or later, but the loaded libnccl is {found}; install a newer NCCL or set NCCL_HOME to one")]
    Unsupported {
        /// The NCCL function (or struct field) that is missing.
        call: &'static str,
        /// The first release that has it.
        needs: Version,
        /// The release that was loaded.
        found: Version,
    },

    /// The loaded libnccl is a release whose struct layouts weft has not verified, and NCCL itself cannot say
    /// them (before 2.31, or a release whose report contradicts weft's measurement): weft refuses rather than
    /// hand NCCL or a kernel a mis-sized struct.
    #[error(
        "NCCL {found} is not a release weft has verified for {what}; verified releases: {verified}. Install one of \
         them (for example `pip install nvidia-nccl-cu13==2.32.3`) and point NCCL_HOME or WEFT_LIBNCCL at it"
    )]
    UnverifiedRelease {
        /// The release that was loaded.
        found: Version,
        /// What weft cannot lay out for it.
        what: String,
        /// The releases weft has verified, as ranges.
        verified: String,
    },

    /// An argument was rejected before NCCL saw it.
    #[error("invalid argument `{argument}`: {problem}")]
    InvalidArgument {
        /// The parameter at fault.
        argument: &'static str,
        /// What is wrong with it and what to pass instead.
        problem: String,
    },

    /// A non-blocking operation did not complete within its deadline; the communicator was aborted.
    #[error("{operation} did not complete within {after:?}; the communicator was aborted (is every rank calling it? raise the timeout if the job is just slow)")]
    Timeout {
        /// What was being waited for.
        operation: &'static str,
        /// The deadline that passed.
        after: Duration,
    },

    /// Work enqueued on a stream did not finish in time and NCCL reported no error: a peer may have stopped, or
    /// the work is just slow. The communicator is left as it was: abort it to end its pending operations.
    #[error(
        "{operation} did not finish within {after:?} and NCCL reports no error: a peer may have stopped or failed; \
         abort the communicator to end its pending operations (raise the timeout if the job is just slow)"
    )]
    Stalled {
        /// What was waited for.
        operation: &'static str,
        /// The deadline that passed.
        after: Duration,
    },

    /// Another rank of this process's [`spmd`](crate::spmd()) job failed while this rank was waiting for work that
    /// needs it (a barrier or a collective it will never reach): the wait ended instead of hanging. The other
    /// rank's error is the cause; this rank's communicator is aborted like the failed one's.
    #[error(
        "rank {rank} of this job failed while this rank waited for work that needs it ({error}); this rank stopped \
         waiting and aborts too: fix rank {rank}'s error"
    )]
    PeerFailed {
        /// The rank that failed first.
        rank: usize,
        /// Its error, as displayed.
        error: String,
    },

    /// The communicator lacks a capability the request needs.
    #[error("the communicator does not support {capability}: {reason}")]
    MissingCapability {
        /// The capability asked for (LSA, GIN, multimem, symmetric windows, …).
        capability: &'static str,
        /// Why not, from the communicator's properties, and what would provide it.
        reason: String,
    },

    /// Ranks registered parts of different sizes for one window. A kernel bounds its accesses to a peer's part by
    /// this rank's own length (docs/macro.md, "Bounds"), so every rank refuses the window (and deregisters it).
    #[error(
        "window registration: rank {rank} registered {bytes} bytes but rank {other_rank} {other_bytes}: every rank of \
         the communicator registers a part of the same size (same element type and length)"
    )]
    AsymmetricWindow {
        /// This rank.
        rank: usize,
        /// The size of this rank's part, in bytes.
        bytes: u64,
        /// The first rank whose part differs.
        other_rank: usize,
        /// The size of its part, in bytes.
        other_bytes: u64,
    },

    /// A launch passed resources of different NCCL communicators (a window of one and a device communicator of
    /// another — a split or shrunk child and its parent, say — or windows of two): a kernel indexes every window by
    /// the device communicator's teams, which mean other ranks, or other sizes, in another communicator. Nothing was
    /// launched.
    #[error(
        "`{kernel}`: `{parameter}` belongs to another NCCL communicator than `{first}`: pass the device communicator \
         and windows of one communicator (create them on the same one)"
    )]
    MixedCommunicators {
        /// The kernel launched.
        kernel: &'static str,
        /// The parameter whose communicator differs.
        parameter: &'static str,
        /// The earlier parameter whose communicator the launch took.
        first: &'static str,
    },

    /// No CUDA driver library (libcuda) could be loaded: this machine has no NVIDIA driver, or it is not on the
    /// library path.
    #[error(
        "no CUDA driver found (tried {tried}): install the NVIDIA driver, or add the directory holding libcuda.so \
         to LD_LIBRARY_PATH"
    )]
    NoCudaDriver {
        /// The library names tried.
        tried: String,
    },

    /// Several ranks were placed on one GPU, which the loaded NCCL does not allow.
    #[error(
        "{ranks} ranks on CUDA device {device} need NCCL {needs} or later (loaded: {found}) and \
         NCCL_MULTI_RANK_GPU_ENABLE=1 in the environment ({}); or place at most one rank per GPU (WEFT_RANKS at \
         most the number of GPUs)",
        if *enabled { "it is set" } else { "it is not set" }
    )]
    GpuSharing {
        /// Ranks placed on the device.
        ranks: usize,
        /// The CUDA device they share.
        device: usize,
        /// The first NCCL release that allows it.
        needs: Version,
        /// The loaded release.
        found: Version,
        /// Whether `NCCL_MULTI_RANK_GPU_ENABLE` is set to a non-zero value.
        enabled: bool,
    },

    /// Several ranks that are threads of this process share a GPU, and CUDA was asked for fewer hardware work queues
    /// than they need: streams of different ranks then share a queue, and a rank's work queued ahead of a peer's
    /// can wait for that peer's work behind it, forever (docs/multi-rank.md, "Hardware queues").
    #[error(
        "{ranks} ranks share CUDA device {device} in this process, and CUDA_DEVICE_MAX_CONNECTIONS is {}: they \
         need {needs} hardware queues (with fewer, streams of different ranks share one and their work can \
         deadlock): start the process with CUDA_DEVICE_MAX_CONNECTIONS={needs} in its environment (CUDA reads it \
         when it sets a context up)",
        if found.is_empty() { "unset (CUDA's default: 8)".to_string() } else { format!("`{found}`") }
    )]
    TooFewQueues {
        /// Ranks of this process on the device.
        ranks: usize,
        /// The CUDA device they share.
        device: usize,
        /// The value of `CUDA_DEVICE_MAX_CONNECTIONS` found in the environment (empty: unset).
        found: String,
        /// The queues ranks sharing a GPU need.
        needs: usize,
    },

    /// A launch whose blocks could not all be resident next to the blocks of the other ranks sharing its GPU:
    /// its blocks wait at barriers for peers' blocks that might never be scheduled, so it would hang.
    #[error(
        "`{kernel}` launches {blocks} blocks, but with {ranks_on_gpu} ranks sharing CUDA device {device} only {fits} \
         blocks of it per rank are sure to be resident at once (the device holds {resident} of them; the \
         multiprocessors NCCL's kernels may hold meanwhile are set aside first); its blocks \
         wait at barriers for the peers' blocks, so a larger grid could hang: launch at most {fits} blocks \
         (`Communicator::one_wave` gives each rank its share of the GPU)"
    )]
    NotCoResident {
        /// The kernel launched.
        kernel: &'static str,
        /// Blocks in the refused grid.
        blocks: u64,
        /// Blocks per rank that fit next to every peer's.
        fits: u64,
        /// Blocks of this kernel and block size the whole device holds at once.
        resident: u64,
        /// Ranks of the communicator on the device.
        ranks_on_gpu: usize,
        /// The CUDA device.
        device: usize,
    },

    /// A launch packed arguments that do not match the compiled kernel's parameter list (`cuFuncGetParamInfo`): a
    /// different number of them, or one of another size. Nothing was launched.
    #[error(
        "`{kernel}` (entry point `{entry_point}`): parameter {parameter} does not match the compiled kernel: \
         {problem}; the kernel's C++ and its launcher disagree (the NCCL headers the kernel was compiled against must \
         be those of the loaded libnccl: `cargo xtask doctor` shows both)"
    )]
    ParamMismatch {
        /// The kernel launched.
        kernel: &'static str,
        /// Its entry point.
        entry_point: &'static str,
        /// The parameter that differs: its name and position (`` `dev` (#0) ``), or its position.
        parameter: String,
        /// What differs.
        problem: String,
    },

    /// A launch in which an access of the kernel the `#[weft::kernel]` macro bounded would fall outside its buffer
    /// (docs/macro.md, "Bounds"). Nothing was launched.
    #[error(
        "`{kernel}` would access `{parameter}` out of bounds at `{access}` (line {line}): {problem} (if the access is \
         guarded in a way weft cannot follow, `launch_unchecked` launches it on your word: read its contract)"
    )]
    OutOfBounds {
        /// The kernel launched.
        kernel: &'static str,
        /// The buffer, window or shared array accessed (for a view or sub-slice: the parameter it comes from).
        parameter: &'static str,
        /// The access, as written in the kernel.
        access: &'static str,
        /// Its line in the kernel's source file.
        line: u32,
        /// The largest index the access can reach and the length it has, or why weft cannot bound it; and the fix.
        problem: String,
    },

    /// A CUDA driver call failed.
    #[error("CUDA error: {0}")]
    Cuda(#[source] cudarc::driver::DriverError),

    /// A weft kernel stopped itself on the device — a failed device-side bounds check, a misused `gemm_block` —
    /// and the CUDA call that noticed failed with `source`. The trap ended the GPU's CUDA context (every rank
    /// sharing it loses its work): end the process and fix what `report` names.
    #[error("{report} (CUDA: {source}); the GPU's CUDA context is lost: end the process")]
    KernelTrapped {
        /// Which kernel, where in its grid, and why (crate::trap).
        report: crate::trap::TrapReport,
        /// The CUDA error that surfaced it.
        #[source]
        source: cudarc::driver::DriverError,
    },

    /// Run-time compilation or loading of a kernel failed.
    #[error(transparent)]
    Jit(#[from] crate::jit::JitError),
}

/// One place libnccl was looked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadAttempt {
    /// The path (or bare soname) handed to the dynamic linker.
    pub path: String,
    /// Why it could not be used.
    pub error: String,
}

impl LoadAttempt {
    fn list(tried: &[LoadAttempt]) -> String {
        if tried.is_empty() {
            return "nothing".into();
        }
        tried.iter().map(|a| format!("{}: {}", a.path, a.error)).collect::<Vec<_>>().join("; ")
    }
}

fn last_error_suffix(last_error: &str) -> String {
    if last_error.is_empty() {
        String::new()
    } else {
        format!(": {last_error}")
    }
}

/// `ncclResult_t`, as a Rust enum that keeps codes it does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResultCode {
    /// `ncclUnhandledCudaError`: a CUDA call inside NCCL failed.
    UnhandledCudaError,
    /// `ncclSystemError`: a system call (socket, memory, …) failed.
    SystemError,
    /// `ncclInternalError`: an NCCL bug or corrupted state.
    InternalError,
    /// `ncclInvalidArgument`: a bad argument.
    InvalidArgument,
    /// `ncclInvalidUsage`: a call made in the wrong order or state.
    InvalidUsage,
    /// `ncclRemoteError`: a peer failed or went away.
    RemoteError,
    /// `ncclInProgress`: a non-blocking operation is still running (an error only where completion was required).
    InProgress,
    /// `ncclTimeout` (2.32+): an NCCL-side timeout.
    Timeout,
    /// A code this build of weft does not know.
    Other(i32),
}

impl ResultCode {
    /// The code as NCCL numbers it.
    pub fn raw(self) -> i32 {
        match self {
            ResultCode::UnhandledCudaError => 1,
            ResultCode::SystemError => 2,
            ResultCode::InternalError => 3,
            ResultCode::InvalidArgument => 4,
            ResultCode::InvalidUsage => 5,
            ResultCode::RemoteError => 6,
            ResultCode::InProgress => 7,
            ResultCode::Timeout => 8,
            ResultCode::Other(code) => code,
        }
    }

    /// The code for NCCL's number `raw` (0, success, is not an error and maps to `Other(0)`).
    pub fn from_raw(raw: i32) -> ResultCode {
        match raw {
            1 => ResultCode::UnhandledCudaError,
            2 => ResultCode::SystemError,
            3 => ResultCode::InternalError,
            4 => ResultCode::InvalidArgument,
            5 => ResultCode::InvalidUsage,
            6 => ResultCode::RemoteError,
            7 => ResultCode::InProgress,
            8 => ResultCode::Timeout,
            other => ResultCode::Other(other),
        }
    }
}

impl fmt::Display for ResultCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            ResultCode::UnhandledCudaError => "ncclUnhandledCudaError",
            ResultCode::SystemError => "ncclSystemError",
            ResultCode::InternalError => "ncclInternalError",
            ResultCode::InvalidArgument => "ncclInvalidArgument",
            ResultCode::InvalidUsage => "ncclInvalidUsage",
            ResultCode::RemoteError => "ncclRemoteError",
            ResultCode::InProgress => "ncclInProgress",
            ResultCode::Timeout => "ncclTimeout",
            ResultCode::Other(code) => return write!(f, "ncclResult_t {code}"),
        };
        f.write_str(name)
    }
}

impl Error {
    /// The NCCL result code, if this is an NCCL failure.
    pub fn nccl_code(&self) -> Option<ResultCode> {
        match self {
            Error::Nccl { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn invalid(argument: &'static str, problem: impl Into<String>) -> Error {
        Error::InvalidArgument { argument, problem: problem.into() }
    }
}

/// `Result` with weft-host's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The same text as `Display`, which already carries every field (NCCL's result code and messages included): a
/// `main` that returns `Result<(), Error>` prints weft's message, not a dump of the enum.
/// A driver error, carrying the report of a weft kernel that trapped if one did (crate::trap): that trap is what
/// made every CUDA call of its context fail.
impl From<cudarc::driver::DriverError> for Error {
    fn from(source: cudarc::driver::DriverError) -> Error {
        match crate::trap::report() {
            Some(report) => Error::KernelTrapped { report, source },
            None => Error::Cuda(source),
        }
    }
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_prints_the_display_text_so_main_shows_weft_s_message() {
        let error = Error::invalid("devices", "list at least one CUDA device");
        assert_eq!(format!("{error:?}"), format!("{error}"));
        assert_eq!(format!("{error:?}"), "invalid argument `devices`: list at least one CUDA device");
        let jit = Error::from(crate::jit::JitError::InvalidEntryPoint { name: "x\0".into() });
        assert_eq!(format!("{jit:?}"), format!("{jit}"));
    }

    use super::*;

    #[test]
    fn codes_round_trip_and_name_themselves() {
        for raw in 1..=9 {
            assert_eq!(ResultCode::from_raw(raw).raw(), raw);
        }
        assert_eq!(ResultCode::InvalidUsage.to_string(), "ncclInvalidUsage");
        assert_eq!(ResultCode::Other(42).to_string(), "ncclResult_t 42");
    }

    #[test]
    fn messages_name_the_fix() {
        let unsupported = Error::Unsupported {
            call: "ncclCommSuspend",
            needs: Version::new(2, 29, 0),
            found: Version::new(2, 28, 9),
        };
        let text = unsupported.to_string();
        assert!(text.contains("ncclCommSuspend") && text.contains("2.29.0") && text.contains("2.28.9"), "{text}");
        let missing = Error::LibraryNotFound { tried: vec![] };
        assert!(missing.to_string().contains("NCCL_HOME"));
        let nccl = Error::Nccl {
            call: "ncclAllReduce",
            code: ResultCode::InvalidArgument,
            description: "invalid argument".into(),
            last_error: "count is 0".into(),
        };
        assert_eq!(nccl.nccl_code(), Some(ResultCode::InvalidArgument));
        assert!(nccl.to_string().ends_with(": count is 0"), "{nccl}");
    }
}
