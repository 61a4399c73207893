//! Why a weft kernel stopped itself. A kernel that traps — a failed device-side bounds check, a misused
//! `gemm_block` — ends its CUDA context, after which no device memory can be read. So before trapping it writes a
//! report (`WeftTrapReport` in device/cuda/weft.cuh) into pinned host memory, which the host can always read, and the
//! next CUDA error weft converts carries it: [`Error::KernelTrapped`](crate::Error::KernelTrapped).
//!
//! Every module weft loads is armed here: its `weft_trap_target` global gets the report's address and a number
//! naming the module's kernel. The report is one per process (the first trap's; a trap ends its context, and with it
//! the work of every rank sharing that GPU), 64 bytes of pinned memory allocated at the first load and kept for the
//! process's life. The kernels' `printf` messages stay where they were (the wgmma form has none: a `printf` would
//! serialize its MMAs), so the report is the one place the reason is sure to be.

use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdeviceptr, CU_MEMHOSTALLOC_DEVICEMAP, CU_MEMHOSTALLOC_PORTABLE};
use cudarc::driver::{CudaContext, CudaModule, DriverError};

/// The device's `WeftTrapReport`, byte for byte (weft.cuh asserts its size and offsets).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RawReport {
    state: u32,
    kind: u32,
    line: u32,
    code: u32,
    a: u64,
    b: u64,
    module: u32,
    block: [u32; 3],
    thread: [u32; 3],
    reserved: u32,
}

const _: () = assert!(std::mem::size_of::<RawReport>() == 64);

/// `state` once the device has written every other field.
const COMPLETE: u32 = 2;
/// `kind`s.
const OUT_OF_BOUNDS: u32 = 1;
const GEMM_MISUSE: u32 = 2;
const GEMM_TILES_MISUSE: u32 = 3;

/// The rules `gemm_block` checks on the device, by code: weft.cuh's `gemm_misuse_text` (a test compares the two).
pub(crate) const GEMM_MISUSE_TEXT: [&str; 6] = [
    "launch it with blocks of exactly 256 threads in x (8 warps)",
    "k must be a positive multiple of 32",
    "lda and ldb must be multiples of 8 (16-byte rows)",
    "both operands must start on a 16-byte boundary",
    "col0 must be a multiple of 8 (16-byte rows)",
    "a tile lies outside its operand: a needs rows row0..row0+128 of lda >= k elements, b needs k rows of ldb >= \
     col0 + 128 elements",
];

/// The rules `gemm_tiles` checks on the device, by code: weft.cuh's `gemm_tiles_misuse_text` (a test compares the
/// two). Code 6 is not a rule but the pipeline's bounded wait running out.
pub(crate) const GEMM_TILES_MISUSE_TEXT: [&str; 8] = [
    "launch it with blocks of exactly 384 threads in x (a producer and two consumer warpgroups)",
    "launch it with the dynamic shared memory of its stages (gemm_tiles_config gives it)",
    "a.cols() must equal b.rows() (the k both operands share)",
    "m must be a multiple of 128, n of 256 and k a positive multiple of 64, each below 2^31",
    "a's map must copy 128 x 64 boxes and b's 64 x 64 (make them with TmaOperand::gemm_a and gemm_b)",
    "it needs a GPU of compute capability 8.0 or newer",
    "a pipeline barrier waited for about 2 s: a stage was never filled or never released",
    "a's shards must be a positive multiple of 128 rows each, at most 8, this rank's among them",
];

/// The reason of a misuse report: `what`'s rule `code`, by its text where the host knows it.
fn misuse(what: &str, texts: &[&str], code: u32) -> String {
    match texts.get(code as usize) {
        Some(text) => format!("{what}: {text}"),
        None => format!("{what}: broken rule {code}"),
    }
}

/// What a trapped kernel reported: which kernel, where in its grid, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrapReport {
    /// The kernel's name (`None` if the module was not loaded by weft's JIT).
    pub kernel: Option<String>,
    /// The block and thread that reported (the first of the module's to trap).
    pub block: [u32; 3],
    /// See `block`.
    pub thread: [u32; 3],
    /// The line of the kernel's Rust source.
    pub line: u32,
    /// Why, in words.
    pub reason: String,
}

impl std::fmt::Display for TrapReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        match &self.kernel {
            Some(kernel) => write!(f, "kernel `{kernel}`")?,
            None => write!(f, "a kernel")?,
        }
        write!(
            f,
            " (block ({bx}, {by}, {bz}), thread ({tx}, {ty}, {tz})) stopped at line {} of its source: {}",
            self.line, self.reason
        )
    }
}

impl TrapReport {
    /// The report of a raw record whose `state` says it is complete.
    fn from_raw(raw: &RawReport, kernel: Option<String>) -> TrapReport {
        let reason = match raw.kind {
            OUT_OF_BOUNDS => format!("out-of-bounds access: index {} is not below {}", raw.a, raw.b),
            GEMM_MISUSE => misuse("gemm_block", &GEMM_MISUSE_TEXT, raw.code),
            GEMM_TILES_MISUSE => misuse("gemm_tiles", &GEMM_TILES_MISUSE_TEXT, raw.code),
            other => format!("trap of unknown kind {other}"),
        };
        TrapReport { kernel, block: raw.block, thread: raw.thread, line: raw.line, reason }
    }
}

/// The process's report, in pinned host memory (device-mapped; with unified addressing the same address on every
/// device).
struct Pinned(*mut RawReport);
// SAFETY: the pointer is to process-lifetime pinned memory that is only read here (volatile) and written by devices.
unsafe impl Send for Pinned {}
// SAFETY: as above; no `&mut` to it is ever formed on the host.
unsafe impl Sync for Pinned {}

static REPORT: OnceLock<Pinned> = OnceLock::new();
/// Kernel names by module number (number = index + 1; 0 means unnamed).
static KERNELS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// The report's pinned memory, allocated (zeroed) at the first call, with `ctx` current.
fn report_memory(ctx: &Arc<CudaContext>) -> Result<*mut RawReport, DriverError> {
    if let Some(pinned) = REPORT.get() {
        return Ok(pinned.0);
    }
    ctx.bind_to_thread()?;
    let size = std::mem::size_of::<RawReport>();
    // SAFETY: a plain allocation of `size` bytes with a current context; the flags make it visible to every context
    // (portable) and to kernels (device-mapped).
    let raw =
        unsafe { cudarc::driver::result::malloc_host(size, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)? };
    let report = raw.cast::<RawReport>();
    // SAFETY: `report` points to `size` writable bytes just allocated, aligned for `RawReport` (page-aligned).
    unsafe { report.write_volatile(RawReport::default()) };
    match REPORT.set(Pinned(report)) {
        Ok(()) => Ok(report),
        Err(_) => {
            // Another thread allocated first: keep theirs.
            // SAFETY: `raw` came from `malloc_host` above and nothing else has seen it.
            unsafe { cudarc::driver::result::free_host(raw)? };
            Ok(REPORT.get().map(|p| p.0).unwrap_or(report))
        }
    }
}

/// Gives `module` (the kernel `kernel`, just loaded into `ctx`) the report's address: a module without weft.cuh's
/// `weft_trap_target` (not weft's) is left as it is.
pub(crate) fn arm(ctx: &Arc<CudaContext>, module: &Arc<CudaModule>, kernel: &str) -> Result<(), DriverError> {
    let stream = ctx.new_stream()?;
    let mut target = match module.get_global("weft_trap_target", &stream) {
        Ok(view) => view,
        Err(e) if e.0 == cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NOT_FOUND => return Ok(()),
        Err(e) => return Err(e),
    };
    let report = report_memory(ctx)?;
    let mut device: CUdeviceptr = 0;
    ctx.bind_to_thread()?;
    // SAFETY: `report` is pinned host memory allocated with DEVICEMAP; `device` receives its device address.
    if unsafe { cudarc::driver::sys::cuMemHostGetDevicePointer_v2(&mut device, report.cast(), 0) }.result().is_err() {
        // With unified addressing (every 64-bit platform CUDA supports) pinned host memory has the same address on
        // the device as on the host (CUDA driver API, "Unified Addressing").
        device = report as CUdeviceptr;
    }
    let number = {
        let mut kernels = KERNELS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        kernels.push(kernel.to_string());
        kernels.len() as u32
    };
    // `WeftTrapTarget { WeftTrapReport* report; unsigned module; }`: 16 bytes.
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&device.to_le_bytes());
    bytes[8..12].copy_from_slice(&number.to_le_bytes());
    if target.len() < bytes.len() {
        return Ok(());
    }
    let mut head = target.slice_mut(0..bytes.len());
    stream.memcpy_htod(&bytes, &mut head)?;
    // A private stream holding only this copy: waiting for it waits for no other work of the GPU.
    stream.synchronize()
}

/// The first trap's report, once a kernel wrote one (it stays: every later error of the lost context carries it).
pub(crate) fn report() -> Option<TrapReport> {
    let report = REPORT.get()?.0;
    // SAFETY: process-lifetime pinned memory of one `RawReport`; volatile, since devices write it.
    let state = unsafe { std::ptr::addr_of!((*report).state).read_volatile() };
    if state != COMPLETE {
        return None;
    }
    // The device wrote every field before `state` (a system fence between).
    fence(Ordering::Acquire);
    // SAFETY: as above.
    let raw = unsafe { report.read_volatile() };
    let kernels = KERNELS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let kernel = (raw.module as usize).checked_sub(1).and_then(|i| kernels.get(i)).cloned();
    Some(TrapReport::from_raw(&raw, kernel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_say_which_kernel_where_and_why() {
        let raw = RawReport {
            state: COMPLETE,
            kind: GEMM_MISUSE,
            line: 229,
            code: 0,
            module: 1,
            block: [3, 0, 0],
            thread: [17, 0, 0],
            ..RawReport::default()
        };
        let report = TrapReport::from_raw(&raw, Some("gemm_tiles".into()));
        assert_eq!(
            report.to_string(),
            "kernel `gemm_tiles` (block (3, 0, 0), thread (17, 0, 0)) stopped at line 229 of its source: gemm_block: \
             launch it with blocks of exactly 256 threads in x (8 warps)"
        );
        let raw = RawReport { kind: OUT_OF_BOUNDS, line: 12, a: 70_000, b: 65_536, ..raw };
        assert_eq!(
            TrapReport::from_raw(&raw, None).to_string(),
            "a kernel (block (3, 0, 0), thread (17, 0, 0)) stopped at line 12 of its source: out-of-bounds access: \
             index 70000 is not below 65536"
        );
        let raw = RawReport { kind: GEMM_MISUSE, code: 99, ..raw };
        assert!(TrapReport::from_raw(&raw, None).reason.contains("broken rule 99"));
    }

    /// The host's texts are weft.cuh's, in order, and the device's report has the layout read here.
    #[test]
    fn the_rule_texts_and_the_layout_match_weft_cuh() {
        let cuh = weft_device_cuh();
        // The strings `return`ed by weft.cuh's function `name`, in order.
        let texts = |name: &str| -> Vec<String> {
            let head = format!("WEFT_FN const char* {name}");
            let body = &cuh[cuh.find(&head).unwrap_or_else(|| panic!("{name} in weft.cuh"))..];
            let body = &body[..body.find("\n}\n").unwrap_or_else(|| panic!("end of {name}"))];
            body.lines()
                .filter_map(|l| l.split_once("return \"").map(|(_, rest)| rest.trim_end().trim_end_matches("\";")))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(texts("gemm_misuse_text"), GEMM_MISUSE_TEXT.to_vec());
        assert_eq!(texts("gemm_tiles_misuse_text"), GEMM_TILES_MISUSE_TEXT.to_vec());
        let raw = RawReport { kind: GEMM_TILES_MISUSE, code: 1, ..RawReport::default() };
        assert!(TrapReport::from_raw(&raw, None)
            .reason
            .contains("gemm_tiles: launch it with the dynamic shared memory"));
        for field in [
            "unsigned int state;",
            "unsigned int kind;",
            "unsigned int line;",
            "unsigned int code;",
            "unsigned long long a, b;",
            "unsigned int module;",
            "unsigned int block[3], thread[3];",
            "unsigned int reserved;",
        ] {
            assert!(cuh.contains(field), "WeftTrapReport lost `{field}`: update RawReport to match");
        }
        assert!(cuh.contains("static_assert(sizeof(WeftTrapReport) == 64"), "weft.cuh must pin the report's size");
    }

    fn weft_device_cuh() -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/cuda/weft.cuh");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}
