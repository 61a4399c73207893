//! cuBLAS as the examples' and benchmarks' GEMM baseline: row-major bf16 `C = A × B` through `cublasGemmEx`
//! (f32 compute), when libcublas can be loaded.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig};
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;
use std::sync::Arc;
use weft::host::Error;

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
    a: &CudaSlice<bf16>,
    b: &CudaSlice<bf16>,
    c: &mut CudaSlice<bf16>,
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
