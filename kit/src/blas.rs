//! cuBLAS as the examples' and benchmarks' GEMM baseline: row-major bf16 `C = A × B` through `cublasGemmEx`
//! (f32 compute), when libcublas can be loaded.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use half::bf16;
use std::sync::Arc;
use weft::host::{DeviceBuffer, Error};

/// Whether libcublas can be loaded (cudarc looks for it on the library path).
pub fn available() -> bool {
    // SAFETY: only probes whether the library can be opened (no symbol is called).
    unsafe { cudarc::cublas::sys::is_culib_present() }
}

/// What to do without it, for messages.
pub const MISSING: &str = "libcublas not found: add the directory holding libcublas.so (a CUDA toolkit's lib64, or \
                           PyTorch's site-packages/nvidia/cublas/lib) to LD_LIBRARY_PATH";

/// A cuBLAS handle on `stream`, or `None` where libcublas is missing.
pub fn handle(stream: &Arc<CudaStream>) -> Result<Option<CudaBlas>, Error> {
    if !available() {
        return Ok(None);
    }
    CudaBlas::new(stream.clone()).map(Some).map_err(blas_error)
}

/// `c (m × n) = a (m × k) × b (k × n)`, all row-major bf16, on the handle's stream. cuBLAS is column-major:
/// `C^T = B^T × A^T`, so `b` goes first.
pub fn gemm(
    blas: &CudaBlas,
    a: &impl DevicePtr<bf16>,
    b: &impl DevicePtr<bf16>,
    c: &mut impl DevicePtrMut<bf16>,
    (m, n, k): (usize, usize, usize),
) -> Result<(), Error> {
    if a.len() < m * k || b.len() < k * n || c.len() < m * n {
        return Err(Error::InvalidArgument {
            argument: "shape",
            problem: format!(
                "{m} x {n} x {k} needs {} + {} + {} elements; the buffers hold {} + {} + {}",
                m * k,
                k * n,
                m * n,
                a.len(),
                b.len(),
                c.len()
            ),
        });
    }
    let dim = |v: usize| {
        i32::try_from(v)
            .map_err(|_| Error::InvalidArgument { argument: "shape", problem: format!("{v} exceeds cuBLAS's int") })
    };
    let cfg = GemmConfig {
        transa: cublasOperation_t::CUBLAS_OP_N,
        transb: cublasOperation_t::CUBLAS_OP_N,
        m: dim(n)?,
        n: dim(m)?,
        k: dim(k)?,
        alpha: bf16::ONE,
        lda: dim(n)?,
        ldb: dim(k)?,
        beta: bf16::ZERO,
        ldc: dim(n)?,
    };
    // SAFETY: checked above: `b` holds k x n, `a` m x k and `c` m x n elements, matching `cfg`'s dimensions and
    // leading dimensions; cudarc orders the three on the handle's stream.
    unsafe { blas.gemm(cfg, b, a, c) }.map_err(blas_error)
}

fn blas_error(error: cudarc::cublas::result::CublasError) -> Error {
    Error::InvalidArgument { argument: "cublas", problem: format!("cuBLAS failed: {error}") }
}

/// Elements `offset .. offset + len` of a weft buffer as a cuBLAS operand (a block of rows of a row-major matrix),
/// read without waiting for the buffer's pending writes on other streams: a GEMM on one stream starts on a block as
/// soon as device flags say a kernel on another stream has written it (`DeviceBuffer::stream_wait_at_least`), not
/// when that whole kernel ends. The buffer's drop still waits for the read.
pub struct Part<'a> {
    buffer: &'a DeviceBuffer<bf16>,
    offset: usize,
    len: usize,
}

impl<'a> Part<'a> {
    /// `buffer[offset .. offset + len]`, or an error if that is not inside it.
    ///
    /// # Safety
    /// [`DeviceBuffer::device_ptr_unordered`]'s contract, for every use of the part: work reading it on a stream
    /// reads each element only once its writes on other streams are done (the stream waited on flags raised after
    /// them), and every later write of the buffer on another stream or from the host waits for that work first.
    pub unsafe fn of(buffer: &'a DeviceBuffer<bf16>, offset: usize, len: usize) -> Result<Part<'a>, Error> {
        if offset.checked_add(len).is_none_or(|end| end > buffer.len()) {
            return Err(Error::InvalidArgument {
                argument: "offset",
                problem: format!("{len} elements at {offset} are not inside a buffer of {}", buffer.len()),
            });
        }
        Ok(Part { buffer, offset, len })
    }
}

impl DeviceSlice<bf16> for Part<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn stream(&self) -> &Arc<CudaStream> {
        DeviceSlice::stream(self.buffer)
    }
}

impl DevicePtr<bf16> for Part<'_> {
    fn device_ptr<'b>(&'b self, stream: &'b CudaStream) -> (CUdeviceptr, SyncOnDrop<'b>) {
        // SAFETY: the contract of `Part::of`, which made this part.
        let (base, guard) = unsafe { self.buffer.device_ptr_unordered(stream) };
        (base + (self.offset * std::mem::size_of::<bf16>()) as CUdeviceptr, guard)
    }
}
