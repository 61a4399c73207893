//! weft-host: the safe, typestate runtime over NCCL (loaded at run time) and CUDA (through cudarc).

#![warn(missing_docs)]

pub(crate) mod abi;
pub mod discovery;
pub mod jit;
pub mod launch;

pub mod error;
pub mod result;
pub mod sys;
pub mod version;

pub use error::{Error, ResultCode};
pub use version::Version;
pub mod comm;
pub mod config;
pub mod properties;

pub use comm::SuspendFlags;
pub use comm::{
    Abortable, Active, Adopted, Blocking, Communicator, Finalized, Initialized, MemStat, Mode, NonBlocking, Pending,
    Polled, Revoked, State, Suspended, TransitionError, Uninit, UniqueId,
};
pub use config::{Config, CtaPolicy};
pub use properties::{GinConnectionType, GinType, Properties};
pub mod collectives;
pub mod cuda;
pub mod datatype;
pub mod devcomm;
pub mod graph;
pub mod group;
pub mod job;
pub mod placement;
pub mod resources;
pub mod spmd;
pub mod stacks;
pub mod trap;

pub use collectives::Batch;
/// The cudarc weft is built on (streams, buffers, contexts), re-exported so that programs use the same version.
pub use cudarc;
pub use datatype::{Element, ReduceOp};
pub use devcomm::{DevComm, Requirements, Team};
pub use graph::{Capture, Graph, GraphBuffer};
pub use group::{group, Group};
pub use job::{Job, Launcher};
pub use launch::{LaunchConfig, NcclBuffer, NcclBufferMut};
pub use placement::Placement;
pub use resources::{
    CustomOp, DeviceBuffer, PreMulSum, Registered, RegisteredMut, Registration, Scalar, Window, WindowFlags,
};
pub use spmd::{local_devices, spmd};
pub use weft_device::caps;
