//! The C interface NCCL loads: `ncclRma_v14_t` (`src/include/plugin/rma/rma_v14.h`) and the types it uses
//! (`ncclNetProperties_v12_t`, `ncclDebugLogger_t`, constants of `nccl_net.h` and `net_device.h`), written from
//! NCCL 2.30.7's plugin headers. NCCL's pip wheels do not ship these headers, so they are declared here; the
//! layout test in `tests.rs` compiles NCCL's own headers with the C compiler where their source is at hand and
//! compares every offset.

use std::ffi::{c_char, c_int, c_ulong, c_void};

/// `ncclResult_t`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const SUCCESS: NcclResult = 0;
/// `ncclUnhandledCudaError`.
pub const UNHANDLED_CUDA_ERROR: NcclResult = 1;
/// `ncclSystemError`.
pub const SYSTEM_ERROR: NcclResult = 2;
/// `ncclInternalError`.
pub const INTERNAL_ERROR: NcclResult = 3;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: NcclResult = 4;
/// `ncclInvalidUsage`.
pub const INVALID_USAGE: NcclResult = 5;

/// `NCCL_PTR_HOST`: a registration of host memory.
pub const PTR_HOST: c_int = 0x1;
/// `NCCL_PTR_CUDA`: a registration of device memory.
pub const PTR_CUDA: c_int = 0x2;
/// `NCCL_NET_SIGNAL_OP_INC`: add one to the signal word.
pub const SIGNAL_OP_INC: u32 = 0x1;
/// `NCCL_NET_SIGNAL_OP_ADD`: add the signal value to the signal word.
pub const SIGNAL_OP_ADD: u32 = 0x2;
/// `NCCL_NET_HANDLE_MAXSIZE`: the bytes of a listen handle NCCL exchanges between ranks.
pub const HANDLE_MAXSIZE: usize = 128;
/// `NCCL_NET_DEVICE_GIN_PROXY`: the device type that makes NCCL run its GIN proxy over this backend.
pub const NET_DEVICE_GIN_PROXY: c_int = 2;
/// `NCCL_LOG_WARN`.
pub const LOG_WARN: c_int = 2;
/// `NCCL_LOG_INFO`.
pub const LOG_INFO: c_int = 3;
/// `NCCL_INIT | NCCL_NET`: the subsystems this backend logs under.
pub const LOG_FLAGS: c_ulong = 0x1 | 0x10;

/// `ncclDebugLogger_t`: NCCL's logger, `printf`-like.
pub type DebugLogger = Option<
    unsafe extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...),
>;

/// `ncclNetVDeviceProps_v12_t`.
#[allow(missing_docs)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct VirtualDeviceProperties {
    pub ndevs: c_int,
    pub devs: [c_int; 8],
}

/// `ncclNetProperties_v12_t`.
#[allow(missing_docs)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct NetProperties {
    pub name: *mut c_char,
    pub pci_path: *mut c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub net_device_type: c_int,
    pub net_device_version: c_int,
    pub v_props: VirtualDeviceProperties,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request_size: c_int,
    pub rail_id: i16,
    pub plane_id: i16,
}

/// `ncclRmaConfig_v14_t`.
#[allow(missing_docs)]
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RmaConfig {
    pub n_contexts: c_int,
    pub traffic_class: c_int,
    pub rank_stride: c_int,
}

type Ctx = *mut c_void;

/// `ncclRma_v14_t`: the table of entry points NCCL looks up as `ncclRmaPlugin_v14`. Each field is the entry point
/// of the same name in `rma_v14.h`, in its order, where NCCL documents what it must do.
#[allow(missing_docs, clippy::type_complexity)]
#[repr(C)]
#[derive(Debug)]
pub struct RmaV14 {
    pub name: *const c_char,
    pub init: Option<unsafe extern "C" fn(ctx: *mut Ctx, comm_id: u64, log: DebugLogger) -> NcclResult>,
    pub devices: Option<unsafe extern "C" fn(ndev: *mut c_int) -> NcclResult>,
    pub get_properties: Option<unsafe extern "C" fn(dev: c_int, props: *mut NetProperties) -> NcclResult>,
    pub listen:
        Option<unsafe extern "C" fn(ctx: Ctx, dev: c_int, handle: *mut c_void, listen_comm: *mut Ctx) -> NcclResult>,
    pub connect: Option<
        unsafe extern "C" fn(
            ctx: Ctx,
            handles: *mut *mut c_void,
            nranks: c_int,
            rank: c_int,
            listen_comm: Ctx,
            coll_comm: *mut Ctx,
        ) -> NcclResult,
    >,
    pub create_context:
        Option<unsafe extern "C" fn(coll_comm: Ctx, config: *mut RmaConfig, rma_ctx: *mut Ctx) -> NcclResult>,
    pub reg_mr_sym: Option<
        unsafe extern "C" fn(
            coll_comm: Ctx,
            data: *mut c_void,
            size: usize,
            kind: c_int,
            mr_flags: u64,
            mhandle: *mut Ctx,
        ) -> NcclResult,
    >,
    pub reg_mr_sym_dma_buf: Option<
        unsafe extern "C" fn(
            coll_comm: Ctx,
            data: *mut c_void,
            size: usize,
            kind: c_int,
            offset: u64,
            fd: c_int,
            mr_flags: u64,
            mhandle: *mut Ctx,
        ) -> NcclResult,
    >,
    pub dereg_mr_sym: Option<unsafe extern "C" fn(coll_comm: Ctx, mhandle: Ctx) -> NcclResult>,
    pub destroy_context: Option<unsafe extern "C" fn(rma_ctx: Ctx) -> NcclResult>,
    pub close_coll: Option<unsafe extern "C" fn(coll_comm: Ctx) -> NcclResult>,
    pub close_listen: Option<unsafe extern "C" fn(listen_comm: Ctx) -> NcclResult>,
    pub iput: Option<
        unsafe extern "C" fn(
            rma_ctx: Ctx,
            context: c_int,
            src_off: u64,
            src_mhandle: Ctx,
            size: usize,
            dst_off: u64,
            dst_mhandle: Ctx,
            rank: u32,
            request: *mut Ctx,
        ) -> NcclResult,
    >,
    pub iput_signal: Option<
        unsafe extern "C" fn(
            rma_ctx: Ctx,
            context: c_int,
            src_off: u64,
            src_mhandle: Ctx,
            size: usize,
            dst_off: u64,
            dst_mhandle: Ctx,
            rank: u32,
            signal_off: u64,
            signal_mhandle: Ctx,
            signal_value: u64,
            signal_op: u32,
            is_strong_signal: bool,
            request: *mut Ctx,
        ) -> NcclResult,
    >,
    pub iget: Option<
        unsafe extern "C" fn(
            rma_ctx: Ctx,
            context: c_int,
            remote_off: u64,
            remote_mhandle: Ctx,
            size: usize,
            local_off: u64,
            local_mhandle: Ctx,
            rank: u32,
            request: *mut Ctx,
        ) -> NcclResult,
    >,
    pub iflush: Option<
        unsafe extern "C" fn(rma_ctx: Ctx, context: c_int, mhandle: Ctx, rank: u32, request: *mut Ctx) -> NcclResult,
    >,
    pub test: Option<unsafe extern "C" fn(coll_comm: Ctx, request: Ctx, done: *mut c_int) -> NcclResult>,
    pub rma_progress: Option<unsafe extern "C" fn(rma_ctx: Ctx) -> NcclResult>,
    pub query_last_error: Option<unsafe extern "C" fn(rma_ctx: Ctx, has_error: *mut bool) -> NcclResult>,
    pub finalize: Option<unsafe extern "C" fn(ctx: Ctx) -> NcclResult>,
}

// SAFETY: the table is immutable for the life of the process: a name pointing at a static C string and function
// pointers; sharing it between threads reads nothing that changes.
unsafe impl Sync for RmaV14 {}
