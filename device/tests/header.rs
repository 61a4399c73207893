//! weft.cuh compiles with nvcc, to sm_90 cubins, against every supported NCCL's device headers.
//!
//! Needs the CUDA/NCCL toolchain `cargo xtask test` provisions, named by three environment variables:
//! `WEFT_NVCC` (the nvcc binary), `CUDA_HOME` (a directory with `include/`) and `WEFT_CODEGEN_NCCL_INCLUDES`
//! (`2.28.9=/abs/include;2.32.3=/abs/include`). Without them the tests fail: a compile test that passes without
//! compiling anything would hide a broken header.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::thread;

struct Toolchain {
    nvcc: PathBuf,
    cuda_include: PathBuf,
    /// (version label, NCCL include directory)
    nccl: Vec<(String, PathBuf)>,
}

fn toolchain() -> Toolchain {
    const HOW: &str = "run `cargo xtask test`, which provisions nvcc and the NCCL 2.28.9/2.32.3 headers and sets \
                       WEFT_NVCC, CUDA_HOME and WEFT_CODEGEN_NCCL_INCLUDES (format \
                       `2.28.9=/abs/include;2.32.3=/abs/include`)";
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("weft-device header test: {name} is not set; {HOW}"))
    };
    let nvcc = PathBuf::from(var("WEFT_NVCC"));
    let cuda_include = PathBuf::from(var("CUDA_HOME")).join("include");
    let nccl: Vec<(String, PathBuf)> = var("WEFT_CODEGEN_NCCL_INCLUDES")
        .split(';')
        .filter(|entry| !entry.trim().is_empty())
        .map(|entry| {
            let (version, dir) = entry
                .split_once('=')
                .unwrap_or_else(|| panic!("WEFT_CODEGEN_NCCL_INCLUDES entry `{entry}` is not VERSION=DIR; {HOW}"));
            (version.trim().to_owned(), PathBuf::from(dir.trim()))
        })
        .collect();
    assert!(!nccl.is_empty(), "WEFT_CODEGEN_NCCL_INCLUDES names no NCCL include directory; {HOW}");
    assert!(nvcc.is_file(), "WEFT_NVCC={} is not a file; {HOW}", nvcc.display());
    assert!(cuda_include.join("cuda_runtime.h").is_file(), "CUDA_HOME has no include/cuda_runtime.h; {HOW}");
    Toolchain { nvcc, cuda_include, nccl }
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH` as nccl.h in `include` defines them.
fn header_version(include: &Path) -> String {
    let text = std::fs::read_to_string(include.join("nccl.h"))
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", include.join("nccl.h").display()));
    let define = |name: &str| {
        text.lines()
            .find_map(|line| {
                let rest = line.trim().strip_prefix("#define")?.trim_start();
                let value = rest.strip_prefix(name)?;
                value.starts_with(char::is_whitespace).then(|| value.trim().to_owned())
            })
            .unwrap_or_else(|| panic!("{} does not define {name}", include.display()))
    };
    format!("{}.{}.{}", define("NCCL_MAJOR"), define("NCCL_MINOR"), define("NCCL_PATCH"))
}

fn at_least_2_32(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 32)
}

fn nvcc(tc: &Toolchain, nccl_include: &Path, source: &Path, cubin: &Path) -> Output {
    Command::new(&tc.nvcc)
        .args(["-cubin", "-arch=sm_90", "-std=c++17", "--extended-lambda", "--expt-relaxed-constexpr"])
        .arg("-I")
        .arg(crate_dir().join("cuda"))
        .arg("-I")
        .arg(nccl_include)
        .arg("-I")
        .arg(&tc.cuda_include)
        .arg("-I")
        .arg(tc.cuda_include.join("cccl"))
        .arg(source)
        .arg("-o")
        .arg(cubin)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tc.nvcc.display()))
}

fn out_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(name)
}

/// Runs `f` for every NCCL include set on its own thread; panics listing every failure.
fn for_each_nccl(tc: &Toolchain, f: impl Fn(&str, &Path) -> Result<(), String> + Sync) {
    let failures: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = tc.nccl.iter().map(|(version, include)| s.spawn(|| f(version, include))).collect();
        handles.into_iter().filter_map(|h| h.join().expect("compile thread panicked").err()).collect()
    });
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn nccl_include_labels_match_their_headers() {
    let tc = toolchain();
    for (label, include) in &tc.nccl {
        assert_eq!(&header_version(include), label, "{} holds other NCCL headers than its label", include.display());
    }
}

#[test]
fn every_vocabulary_item_compiles_against_every_nccl() {
    let tc = toolchain();
    let source = crate_dir().join("tests/cuda/vocabulary.cu");
    for_each_nccl(&tc, |version, include| {
        let cubin = out_path(&format!("vocabulary-{version}.cubin"));
        let out = nvcc(&tc, include, &source, &cubin);
        if !out.status.success() {
            return Err(format!(
                "weft.cuh + vocabulary.cu failed against NCCL {version} ({}):\n{}",
                include.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let bytes = std::fs::read(&cubin).map_err(|e| format!("no cubin for NCCL {version}: {e}"))?;
        // Entry points of the DESIGN.md kernel as the macro names them.
        for entry in ["rs_allreduce_add__f32", "rs_allreduce_add__bf16", "lsa_barriers", "gin_puts", "ll_a2a"] {
            if !bytes.windows(entry.len()).any(|w| w == entry.as_bytes()) {
                return Err(format!("cubin for NCCL {version} lacks entry point {entry}"));
            }
        }
        Ok(())
    });
}

#[test]
fn items_needing_nccl_2_32_fail_with_weft_messages_only_when_used() {
    let tc = toolchain();
    let source = crate_dir().join("tests/cuda/unavailable.cu");
    // unavailable.cu uses this many 2.32-only items, one per line marked `// N`.
    const ITEMS: usize = 10;
    for_each_nccl(&tc, |version, include| {
        let cubin = out_path(&format!("unavailable-{version}.cubin"));
        let out = nvcc(&tc, include, &source, &cubin);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if at_least_2_32(version) {
            return if out.status.success() {
                Ok(())
            } else {
                Err(format!("2.32-only items failed against NCCL {version}:\n{stderr}"))
            };
        }
        let weft_errors =
            stderr.lines().filter(|l| l.contains("static assertion failed") && l.contains("weft:")).count();
        let all_errors = stderr.lines().filter(|l| l.contains("error")).count() - 1; // minus "N errors detected"
        if out.status.success() || weft_errors != ITEMS || all_errors != ITEMS {
            return Err(format!(
                "against NCCL {version}, expected exactly {ITEMS} weft static_assert errors, got {weft_errors} \
                 ({all_errors} errors in all):\n{stderr}"
            ));
        }
        if !stderr.contains("need NCCL 2.32 or newer") {
            return Err(format!("weft's messages should name the NCCL version needed:\n{stderr}"));
        }
        Ok(())
    });
}
