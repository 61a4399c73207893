//! The compiled kernel's own parameter list against the arguments a launch packed: `cuFuncGetParamInfo` (CUDA 12.4
//! and later) gives each parameter's offset and size in the parameter buffer, and a launch whose packed arguments
//! differ in number or size is refused with an error naming the kernel and the parameter, before the driver would
//! copy the wrong bytes. The list is read from the driver once per function; a later launch compares two short
//! lists.
//!
//! Offsets are not compared. weft launches with `kernelParams` (one pointer per argument), so the driver copies
//! each argument's `size` bytes to the offset it chose itself, and that offset depends on where the GPU's
//! parameter bank starts: on Hopper a 64-byte-aligned parameter (a TMA descriptor) that comes first sits at offset
//! 48, not 0, because the bank's base is 16 bytes past a multiple of 64 (measured on an H100, 2026-12-05).

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use cudarc::driver::sys::{self, cudaError_enum};
use cudarc::driver::CudaFunction;

use crate::error::{Error, Result};

/// Where one parameter sits in the kernel's parameter buffer, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamSlot {
    /// Offset from the start of the parameter buffer.
    pub offset: usize,
    /// Size of the parameter.
    pub size: usize,
}

/// Compares the parameters `pushed` (named `names`, in order) with the compiled entry point's `compiled` list.
pub(crate) fn compare(
    kernel: &'static str,
    entry_point: &'static str,
    names: &[&'static str],
    pushed: &[ParamSlot],
    compiled: &[ParamSlot],
) -> Result<()> {
    let mismatch =
        |parameter: String, problem: String| Err(Error::ParamMismatch { kernel, entry_point, parameter, problem });
    let name = |i: usize| names.get(i).map_or_else(|| format!("#{i}"), |n| format!("`{n}` (#{i})"));
    for (i, (ours, theirs)) in pushed.iter().zip(compiled).enumerate() {
        if ours.size != theirs.size {
            return mismatch(
                name(i),
                format!(
                    "the launch packs {} bytes at offset {}, the compiled kernel takes {} bytes at offset {}",
                    ours.size, ours.offset, theirs.size, theirs.offset
                ),
            );
        }
    }
    match pushed.len().cmp(&compiled.len()) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Less => mismatch(
            format!("#{}", pushed.len()),
            format!("the launch packs {} arguments, the compiled kernel takes {}", pushed.len(), compiled.len()),
        ),
        std::cmp::Ordering::Greater => mismatch(
            name(compiled.len()),
            format!("the launch packs {} arguments, the compiled kernel takes {}", pushed.len(), compiled.len()),
        ),
    }
}

/// `function`'s parameter list, read from the driver the first time and then remembered (each entry keeps its
/// function, and so its module, alive, so a handle in the table is never reused by another function).
pub(crate) fn compiled(function: &CudaFunction) -> Result<Arc<[ParamSlot]>> {
    type Known = HashMap<usize, (Arc<[ParamSlot]>, CudaFunction)>;
    static KNOWN: RwLock<Option<Known>> = RwLock::new(None);
    let key = function.cu_function() as usize;
    let known =
        KNOWN.read().unwrap_or_else(PoisonError::into_inner).as_ref().and_then(|m| m.get(&key)).map(|e| e.0.clone());
    if let Some(slots) = known {
        return Ok(slots);
    }
    let slots: Arc<[ParamSlot]> = read_from_driver(function)?.into();
    KNOWN
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .get_or_insert_with(HashMap::new)
        .insert(key, (slots.clone(), function.clone()));
    Ok(slots)
}

/// Asks `cuFuncGetParamInfo` for parameter 0, 1, … until it answers `CUDA_ERROR_INVALID_VALUE` (past the last).
fn read_from_driver(function: &CudaFunction) -> Result<Vec<ParamSlot>> {
    // More than any C++ entry point weft generates could have (the driver limits parameters to 32 KiB anyway).
    const MOST: usize = 4096;
    let mut slots = Vec::new();
    for index in 0..MOST {
        let (mut offset, mut size) = (0usize, 0usize);
        // SAFETY: `function` is a live, loaded function handle (the `CudaFunction` holds its module); the two
        // out-pointers address locals that outlive the call.
        let status = unsafe { sys::cuFuncGetParamInfo(function.cu_function(), index, &mut offset, &mut size) };
        match status {
            cudaError_enum::CUDA_SUCCESS => slots.push(ParamSlot { offset, size }),
            cudaError_enum::CUDA_ERROR_INVALID_VALUE => return Ok(slots),
            other => return Err(Error::Cuda(cudarc::driver::DriverError(other))),
        }
    }
    Ok(slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slots(list: &[(usize, usize)]) -> Vec<ParamSlot> {
        list.iter().map(|&(offset, size)| ParamSlot { offset, size }).collect()
    }

    fn refused(names: &[&'static str], pushed: &[(usize, usize)], compiled: &[(usize, usize)]) -> String {
        compare("k", "k__f32", names, &slots(pushed), &slots(compiled)).unwrap_err().to_string()
    }

    #[test]
    fn equal_lists_pass() {
        let list = slots(&[(0, 8), (8, 24), (32, 16), (48, 8)]);
        compare("k", "k__f32", &["dev", "x", "out", "n"], &list, &list).unwrap();
        compare("k", "k", &[], &[], &[]).unwrap();
    }

    #[test]
    fn a_different_size_names_the_parameter() {
        // A device communicator of another release's size, say.
        let text = refused(&["dev", "x"], &[(0, 8), (8, 24)], &[(0, 16), (16, 24)]);
        assert!(text.contains("`k`") && text.contains("k__f32"), "{text}");
        assert!(text.contains("`dev` (#0)") && text.contains("packs 8 bytes at offset 0"), "{text}");
        assert!(text.contains("takes 16 bytes at offset 0"), "{text}");
    }

    #[test]
    fn offsets_are_the_drivers_own() {
        // gemm_tma's TMA descriptor on an H100: packed at 0, placed by the driver at 48 (the parameter bank's base
        // is 16 bytes past a multiple of 64); the pointer after it follows at its own offset.
        compare(
            "k",
            "k__bf16",
            &["a", "b", "out"],
            &slots(&[(0, 128), (128, 128), (256, 16)]),
            &slots(&[(48, 128), (176, 128), (304, 16)]),
        )
        .unwrap();
        // A size difference behind an offset difference is still found.
        let text = refused(&["a", "b"], &[(0, 4), (4, 8)], &[(0, 4), (8, 4)]);
        assert!(
            text.contains("`b` (#1)") && text.contains("packs 8 bytes") && text.contains("takes 4 bytes"),
            "{text}"
        );
    }

    #[test]
    fn a_different_count_is_refused_either_way() {
        let text = refused(&["a"], &[(0, 4)], &[(0, 4), (8, 8)]);
        assert!(text.contains("#1") && text.contains("packs 1 arguments, the compiled kernel takes 2"), "{text}");
        let text = refused(&["a", "b"], &[(0, 4), (8, 8)], &[(0, 4)]);
        assert!(text.contains("`b` (#1)") && text.contains("packs 2 arguments, the compiled kernel takes 1"), "{text}");
    }
}
