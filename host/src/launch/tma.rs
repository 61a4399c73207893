//! Matrices described for Hopper's tensor memory accelerator (TMA): what a kernel's `const __grid_constant__
//! CUtensorMap` parameter holds, checked against TMA's rules when made and against its buffer when pushed.
//!
//! A tensor map records a global address and the extent TMA may copy from; a copy never reads outside that extent
//! (boxes that cross its edge are filled with zeros). So a map is as sound as the extent it names: weft encodes it
//! only when it is pushed with its buffer ([`ArgBuffer::push_tma_matrix`](super::ArgBuffer::push_tma_matrix)), after
//! checking that every element of the extent lies inside that buffer, and the launch records its read of the buffer
//! like a `&[T]` argument's (what freeing the buffer waits for).

use std::marker::PhantomData;

use cudarc::driver::sys;

use crate::error::{Error, Result};

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// The element types weft describes for TMA: the tensor-core inputs `f16` and `bf16` (sealed).
pub trait TmaElement: sealed::Sealed + Copy + 'static {
    /// TMA's name for the type.
    const DATA_TYPE: sys::CUtensorMapDataType;
}

impl TmaElement for half::f16 {
    const DATA_TYPE: sys::CUtensorMapDataType = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
}

impl TmaElement for half::bf16 {
    const DATA_TYPE: sys::CUtensorMapDataType = sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

/// The bytes of a box row in the 128-byte swizzle: TMA writes each box row as 128 bytes whose 16-byte chunks are
/// permuted by the row's index, the layout `wgmma` reads as its 128-byte-swizzle operand.
pub const SWIZZLE_BYTES: usize = 128;

/// A row-major `rows × cols` matrix of `T` with `ld` elements from one row to the next, that TMA copies into shared
/// memory `box_rows × box_cols` elements at a time, in the 128-byte swizzle ([`SWIZZLE_BYTES`]).
///
/// ```
/// use weft_host::launch::TmaMatrix;
/// // A 4096 x 8192 bf16 operand, copied in 128-row boxes of 64 columns (one 128-byte swizzled row each).
/// let a = TmaMatrix::<half::bf16>::new(4096, 8192, 8192, [128, 64]).unwrap();
/// assert_eq!((a.box_bytes(), a.elements_spanned()), (16384, 4096 * 8192));
/// // Rows 8 columns apart are fine; 12 are not (TMA steps between rows in multiples of 16 bytes).
/// assert!(TmaMatrix::<half::bf16>::new(64, 12, 12, [64, 64]).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmaMatrix<T> {
    rows: usize,
    cols: usize,
    ld: usize,
    box_rows: u32,
    box_cols: u32,
    element: PhantomData<T>,
}

/// TMA's limits (CUDA driver API, `cuTensorMapEncodeTiled`): each extent at most 2^32 elements, a row stride
/// below 2^40 bytes and a multiple of 16, box sides of 1 to 256 elements, a box row a multiple of 16 bytes.
const MAX_EXTENT: usize = 1 << 32;
const MAX_STRIDE_BYTES: usize = 1 << 40;
const MAX_BOX: u32 = 256;

impl<T: TmaElement> TmaMatrix<T> {
    /// The description, checked against TMA's rules; each error names the argument and what it must be.
    pub fn new(rows: usize, cols: usize, ld: usize, [box_rows, box_cols]: [u32; 2]) -> Result<TmaMatrix<T>> {
        let size = std::mem::size_of::<T>();
        if rows == 0 || cols == 0 {
            return Err(Error::invalid(
                "rows",
                format!("a {rows} x {cols} matrix is empty: TMA copies at least 1 x 1"),
            ));
        }
        if rows > MAX_EXTENT || cols > MAX_EXTENT {
            return Err(Error::invalid(
                "rows",
                format!("{rows} x {cols}: TMA addresses at most 2^32 rows and columns; split the matrix"),
            ));
        }
        if ld < cols {
            return Err(Error::invalid(
                "ld",
                format!("{ld} elements from row to row is fewer than the {cols} columns: rows would overlap"),
            ));
        }
        if (ld * size) % 16 != 0 || ld * size >= MAX_STRIDE_BYTES {
            return Err(Error::invalid(
                "ld",
                format!(
                    "{ld} elements ({} bytes) from row to row: TMA steps between rows in multiples of 16 bytes below \
                     2^40 (ld a multiple of {})",
                    ld * size,
                    16 / size
                ),
            ));
        }
        if !(1..=MAX_BOX).contains(&box_rows) || !(1..=MAX_BOX).contains(&box_cols) {
            return Err(Error::invalid(
                "box",
                format!("a {box_rows} x {box_cols} box: TMA copies boxes of 1 to {MAX_BOX} elements a side"),
            ));
        }
        let row_bytes = box_cols as usize * size;
        if row_bytes % 16 != 0 || row_bytes > SWIZZLE_BYTES {
            return Err(Error::invalid(
                "box",
                format!(
                    "{box_cols} columns make a box row of {row_bytes} bytes: in the 128-byte swizzle a box row is a \
                     multiple of 16 bytes up to 128 ({} to {} columns in steps of {})",
                    16 / size,
                    SWIZZLE_BYTES / size,
                    16 / size
                ),
            ));
        }
        Ok(TmaMatrix { rows, cols, ld, box_rows, box_cols, element: PhantomData })
    }

    /// Rows of the matrix.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of the matrix.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Elements from one row to the next.
    pub fn ld(&self) -> usize {
        self.ld
    }

    /// The box one copy moves: `[rows, columns]`.
    pub fn box_shape(&self) -> [u32; 2] {
        [self.box_rows, self.box_cols]
    }

    /// The shared memory one copy fills: `box_rows × box_cols` elements.
    pub fn box_bytes(&self) -> usize {
        self.box_rows as usize * self.box_cols as usize * std::mem::size_of::<T>()
    }

    /// The elements from the first to the last the matrix covers: a buffer must hold at least this many.
    pub fn elements_spanned(&self) -> usize {
        (self.rows - 1) * self.ld + self.cols
    }

    /// The `CUtensorMap` (its 128 bytes, as a kernel takes them) for the matrix at device `address`, which must be
    /// 16-byte aligned. The caller vouches that `address` starts at least [`elements_spanned`](Self::elements_spanned)
    /// elements of live device memory ([`ArgBuffer::push_tma_matrix`](super::ArgBuffer::push_tma_matrix) checks it).
    pub(crate) fn encode(&self, address: u64) -> Result<[u8; 128]> {
        if address % 16 != 0 {
            return Err(Error::invalid(
                "buffer",
                format!("starts at {address:#x}: TMA copies from 16-byte aligned addresses; pass an aligned buffer"),
            ));
        }
        crate::cuda::driver()?;
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        // Innermost first: columns, then rows; the one stride is the rows'.
        let dims = [self.cols as u64, self.rows as u64];
        let strides = [(self.ld * std::mem::size_of::<T>()) as u64];
        let boxes = [self.box_cols, self.box_rows];
        let element_strides = [1u32, 1];
        // SAFETY: `map` is a CUtensorMap (its size, aligned past the 64 bytes the encode asks), `dims`, `strides`,
        // `boxes` and `element_strides` are live arrays of the lengths rank 2 asks (2, 1, 2, 2), and the values meet
        // TMA's rules (checked in `new`, and the address above). The encode writes `map` only, reads those arrays,
        // and records `address` without dereferencing it.
        unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                T::DATA_TYPE,
                2,
                address as usize as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                element_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        }
        .result()?;
        let mut bytes = [0u8; 128];
        for (chunk, word) in bytes.chunks_exact_mut(8).zip(map.opaque) {
            chunk.copy_from_slice(&word.to_ne_bytes());
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    fn problem(result: Result<TmaMatrix<bf16>>) -> (String, String) {
        match result.unwrap_err() {
            Error::InvalidArgument { argument, problem } => (argument.to_string(), problem),
            other => panic!("not an InvalidArgument: {other:?}"),
        }
    }

    #[test]
    fn a_matrix_is_checked_against_tmas_rules_and_each_error_names_what_to_change() {
        let ok = TmaMatrix::<bf16>::new(4096, 4096, 4096, [128, 64]).unwrap();
        assert_eq!((ok.rows(), ok.cols(), ok.ld(), ok.box_shape()), (4096, 4096, 4096, [128, 64]));
        assert_eq!((ok.box_bytes(), ok.elements_spanned()), (128 * 64 * 2, 4096 * 4096));
        // A sub-matrix of a wider one: the span ends at the last row's last column.
        let sub = TmaMatrix::<f16>::new(3, 16, 64, [8, 16]).unwrap();
        assert_eq!(sub.elements_spanned(), 2 * 64 + 16);
        for (result, argument, says) in [
            (TmaMatrix::new(0, 8, 8, [8, 8]), "rows", "empty"),
            (TmaMatrix::new(8, 16, 8, [8, 8]), "ld", "overlap"),
            (TmaMatrix::new(8, 12, 12, [8, 8]), "ld", "a multiple of 8"),
            (TmaMatrix::new(8, 8, 8, [0, 8]), "box", "1 to 256"),
            (TmaMatrix::new(8, 8, 8, [257, 8]), "box", "1 to 256"),
            (TmaMatrix::new(512, 512, 512, [64, 128]), "box", "up to 128"),
            (TmaMatrix::new(512, 512, 512, [64, 4]), "box", "8 to 64 columns"),
        ] {
            let (named, text) = problem(result);
            assert_eq!(named, argument, "{text}");
            assert!(text.contains(says), "{text}");
        }
    }

    #[test]
    fn an_unaligned_address_is_refused_before_the_driver_is_asked() {
        let a = TmaMatrix::<bf16>::new(64, 64, 64, [64, 64]).unwrap();
        let error = a.encode(0x1008).unwrap_err();
        assert!(error.to_string().contains("16-byte aligned"), "{error}");
    }
}
