//! CPU models of GPU code that no test here can run: each is a Python script that exits non-zero on a mismatch and
//! when the lines of the code it transcribes change, run on every `cargo xtask test`.
//! - `scripts/wgmma_layout_model.py` (standard library): the wgmma mainloop of `gemm_block` (device/cuda/weft.cuh),
//!   its shared-memory stages, matrix descriptors and accumulator mapping against the PTX ISA's canonical layouts.
//! - `scripts/gemm_wide_model.py` (standard library, on top of the previous one): the 128 × 256-tile wgmma experiment
//!   of the GEMM benchmark (benches/cuda/gemm_wide.cu): its stages, descriptors and epilogue.
//! - `scripts/gemm_tma_model.py` (standard library, on top of `wgmma_layout_model.py`): the GEMM benchmark's TMA
//!   experiment (benches/cuda/gemm_tma.cu) and weft's own loop on the same protocol (weft.cuh's `GemmTiles`): the TMA
//!   boxes and 128-byte swizzle, descriptors and epilogue, and the mbarrier pipeline simulated under random
//!   schedules, with wrong protocols shown to be caught.
//! - `scripts/gemm_layout_model.py` (numpy): the mma.sync mainloop's stage fill, `ldmatrix` addresses, fragments and
//!   epilogue mapping, multiplied out against A × B.
//! - `scripts/tp_gemm_model.py` (numpy): the tile walks, owners, reduce-scatter slots and signalled chunks of the
//!   tensor-parallel GEMM kernels (kit/src/kernels/gemm_tp.rs) at 1, 2, 4 and 8 ranks.
//!
//! The numpy ones run with `WEFT_TEST_PYTHON`, the venv `cargo xtask` provisions with numpy in it.

use std::path::Path;
use std::process::Command;

fn run_model(python: &str, script: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = match Command::new(python).arg(root.join(script)).current_dir(root).output() {
        Ok(output) => output,
        Err(e) => {
            // Not a pass: the skip says why, and CI's machine has python3 (the toolchain's pip needs it).
            eprintln!("skipped: {script} needs {python} ({e})");
            return;
        }
    };
    assert!(
        output.status.success(),
        "{script} found a mismatch:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("OK:"), "{script} did not report OK");
}

#[test]
fn the_wgmma_mainloop_reads_every_operand_element_where_the_model_of_the_ptx_layouts_says() {
    run_model("python3", "scripts/wgmma_layout_model.py");
}

#[test]
fn the_wide_tile_gemm_experiment_reads_and_writes_where_the_model_of_the_ptx_layouts_says() {
    run_model("python3", "scripts/gemm_wide_model.py");
}

#[test]
fn the_tma_gemm_experiment_reads_writes_and_hands_over_stages_where_the_model_says() {
    run_model("python3", "scripts/gemm_tma_model.py");
}

/// The venv's python (with numpy), or a skip saying why.
fn numpy_python() -> Option<String> {
    let python = std::env::var("WEFT_TEST_PYTHON").ok();
    if python.is_none() {
        eprintln!(
            "skipped: WEFT_TEST_PYTHON is not set (run the tests through `cargo xtask test`, whose venv has numpy)"
        );
    }
    python
}

#[test]
fn the_mma_sync_mainloop_model_multiplies_out_to_a_times_b() {
    if let Some(python) = numpy_python() {
        run_model(&python, "scripts/gemm_layout_model.py");
    }
}

#[test]
fn the_tensor_parallel_gemm_walks_give_every_rank_its_result() {
    if let Some(python) = numpy_python() {
        run_model(&python, "scripts/tp_gemm_model.py");
    }
}
