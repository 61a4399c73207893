//! CPU models of GPU code that no test here can run: each is a Python script (standard library only) that exits
//! non-zero on a mismatch, run on every `cargo xtask test`. `scripts/wgmma_layout_model.py` checks the wgmma
//! mainloop of `gemm_block` (device/cuda/weft.cuh): its shared-memory stages, matrix descriptors and accumulator
//! mapping against the PTX ISA's canonical layouts, and fails when the weft.cuh lines it models change.
//! (`scripts/gemm_layout_model.py` and `scripts/tp_gemm_model.py` need numpy and are run by hand.)

use std::path::Path;
use std::process::Command;

fn run_model(script: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = match Command::new("python3").arg(root.join(script)).current_dir(root).output() {
        Ok(output) => output,
        Err(e) => {
            // Not a pass: the skip says why, and CI's machine has python3 (the toolchain's pip needs it).
            eprintln!("skipped: {script} needs python3 on PATH ({e})");
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
    run_model("scripts/wgmma_layout_model.py");
}
