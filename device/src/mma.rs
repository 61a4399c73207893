//! Tensor cores: the warp-level matrix multiply-accumulate `mma.sync.aligned.m16n8k16`, f16 or bf16 inputs and an
//! `f32` accumulator. C++ `weft::MmaA<T>`, `weft::MmaB<T>`, `weft::MmaAcc`, `weft::mma(a, b, acc)` (weft.cuh).
//!
//! A fragment is one lane's share of a tile, held in the registers the instruction takes; all 32 lanes of a warp
//! hold one tile together and must call each operation together (like `shfl`). The types carry the operand and the
//! element type, so passing a B fragment as A, or mixing f16 and bf16, does not compile:
//!
//! - [`MmaA<T>`]: a 16 × 16 tile of the left matrix (row-major in memory);
//! - [`MmaB<T>`]: a 16 × 8 tile of the right matrix (`k` rows × `n` columns, row-major in memory);
//! - [`MmaAcc`]: the 16 × 8 `f32` result tile.
//!
//! Tiles move between memory and fragments through [`MmaLoad`] and [`MmaStore`] on slices, window views and shared
//! arrays, addressed as `(row, column)` of a row-major matrix with `ld` elements per row. Each call checks the whole
//! tile against the buffer on the device (a failed check stops the kernel, as an index would): these accesses are
//! never proven at launch.
//!
//! ```
//! use weft_device::prelude::*;
//!
//! // One warp: out (16 x 8, f32) = a (16 x k) * b (k x 8), k a multiple of 16.
//! fn tile_gemm(a: &[bf16], b: &[bf16], out: &mut [f32], k: usize) {
//!     let mut acc = MmaAcc::zero();
//!     let mut k0 = 0;
//!     while k0 < k {
//!         acc = mma(a.mma_load_a(0, k0, k), b.mma_load_b(k0, 0, 8), acc);
//!         k0 += 16;
//!     }
//!     out.mma_store(acc, 0, 0, 8);
//! }
//! ```

use core::marker::PhantomData;

use crate::device_only;
use crate::numeric::Float;
use crate::shared::SharedArray;
use crate::window::WindowView;

/// The 16-bit input types of `mma.sync m16n8k16`: `f16` and `bf16`.
pub trait MmaElement: Float {}
impl MmaElement for half::f16 {}
impl MmaElement for half::bf16 {}

/// This lane's share of a 16 × 16 tile of the left operand (four 32-bit registers). C++ `weft::MmaA<T>`.
#[derive(Debug, Clone, Copy)]
pub struct MmaA<T: MmaElement> {
    _device_only: PhantomData<T>,
}

/// This lane's share of a 16 × 8 tile of the right operand (two 32-bit registers). C++ `weft::MmaB<T>`.
#[derive(Debug, Clone, Copy)]
pub struct MmaB<T: MmaElement> {
    _device_only: PhantomData<T>,
}

/// This lane's share of a 16 × 8 `f32` accumulator tile (four `f32`). C++ `weft::MmaAcc`.
#[derive(Debug, Clone, Copy)]
pub struct MmaAcc {
    _device_only: PhantomData<f32>,
}

impl MmaAcc {
    /// An all-zero accumulator. C++ `weft::MmaAcc::zero()`.
    pub fn zero() -> MmaAcc {
        device_only("MmaAcc::zero")
    }
}

/// `a × b + acc` for the warp's tiles (`mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}`): every lane of the warp
/// calls it together. C++ `weft::mma(a, b, acc)`.
pub fn mma<T: MmaElement>(a: MmaA<T>, b: MmaB<T>, acc: MmaAcc) -> MmaAcc {
    device_only("mma")
}

/// Fragment loads from a row-major matrix with `ld` elements per row (slices, window views, shared arrays).
pub trait MmaLoad<T: MmaElement> {
    /// The 16 × 16 tile whose top-left element is `(row0, col0)`, as the left operand. C++
    /// `weft::detail::mma_load_a_at(x, row0, col0, ld, line)`.
    fn mma_load_a(&self, row0: usize, col0: usize, ld: usize) -> MmaA<T>;
    /// The 16 × 8 tile whose top-left element is `(k0, n0)` (16 rows `k`, 8 columns `n`), as the right operand.
    /// C++ `weft::detail::mma_load_b_at(x, k0, n0, ld, line)`.
    fn mma_load_b(&self, k0: usize, n0: usize, ld: usize) -> MmaB<T>;
}

/// Stores of an accumulator tile into a row-major `f32` matrix with `ld` elements per row.
pub trait MmaStore {
    /// Writes the 16 × 8 tile to rows `row0..row0 + 16`, columns `col0..col0 + 8`. C++
    /// `weft::detail::mma_store_at(x, acc, row0, col0, ld, line)`.
    fn mma_store(&mut self, acc: MmaAcc, row0: usize, col0: usize, ld: usize);
}

macro_rules! mma_containers {
    ($($ty:ty),*) => {$(
        impl<T: MmaElement> MmaLoad<T> for $ty {
            fn mma_load_a(&self, row0: usize, col0: usize, ld: usize) -> MmaA<T> {
                device_only("mma_load_a")
            }
            fn mma_load_b(&self, k0: usize, n0: usize, ld: usize) -> MmaB<T> {
                device_only("mma_load_b")
            }
        }
    )*};
}
mma_containers!([T], WindowView<'_, T>);

impl<T: MmaElement, const N: usize> MmaLoad<T> for SharedArray<T, N> {
    fn mma_load_a(&self, row0: usize, col0: usize, ld: usize) -> MmaA<T> {
        device_only("mma_load_a")
    }
    fn mma_load_b(&self, k0: usize, n0: usize, ld: usize) -> MmaB<T> {
        device_only("mma_load_b")
    }
}

impl<T: MmaElement, const N: usize> SharedArray<T, N> {
    /// [`MmaLoad::mma_load_a`] with one `ldmatrix.x4` instruction: each lane names one row of the tile. Rows must
    /// start on 16-byte boundaries: `ld` and `col0` multiples of 8 (checked on the device with the tile). C++
    /// `weft::detail::mma_ldmatrix_a_at(s, row0, col0, ld, line)`.
    pub fn mma_ldmatrix_a(&self, row0: usize, col0: usize, ld: usize) -> MmaA<T> {
        device_only("mma_ldmatrix_a")
    }

    /// [`MmaLoad::mma_load_b`] with one transposing `ldmatrix.x2.trans`; `ld` and `n0` multiples of 8. C++
    /// `weft::detail::mma_ldmatrix_b_at(s, k0, n0, ld, line)`.
    pub fn mma_ldmatrix_b(&self, k0: usize, n0: usize, ld: usize) -> MmaB<T> {
        device_only("mma_ldmatrix_b")
    }
}

impl MmaStore for [f32] {
    fn mma_store(&mut self, acc: MmaAcc, row0: usize, col0: usize, ld: usize) {
        device_only("mma_store")
    }
}

impl MmaStore for WindowView<'_, f32> {
    fn mma_store(&mut self, acc: MmaAcc, row0: usize, col0: usize, ld: usize) {
        device_only("mma_store")
    }
}

impl<const N: usize> MmaStore for SharedArray<f32, N> {
    fn mma_store(&mut self, acc: MmaAcc, row0: usize, col0: usize, ld: usize) {
        device_only("mma_store")
    }
}
