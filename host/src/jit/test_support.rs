//! Fake toolchains for the JIT's unit tests: shell-script nvccs and header trees in temporary directories.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Writes `text` to `path`, creating parent directories.
pub(crate) fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("path has a parent")).expect("create parent");
    fs::write(path, text).expect("write file");
}

/// A CUDA "toolkit" under `root`: `bin/nvcc` (a script) and `include/cuda_runtime.h`; returns nvcc's path.
///
/// The script answers `--version`; otherwise it appends its arguments to `<root>/invocations`, fails with an
/// nvcc-like message when the `.cu` contains `#error`, and else writes `FAKECUBIN` plus the source to `-o`.
pub(crate) fn fake_cuda(root: &Path) -> PathBuf {
    let nvcc = root.join("bin").join("nvcc");
    let log = root.join("invocations");
    let script = format!(
        r#"#!/bin/sh
if [ "$1" = "--version" ]; then
  echo "nvcc: fake"; echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0
fi
echo "$*" >> "{log}"
out=""; src=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out="$2"; shift 2 ;;
    *.cu) src="$1"; shift ;;
    *) shift ;;
  esac
done
if grep -q '#error' "$src"; then
  echo "note: preamble" >&2
  echo "$src(3): error: the kernel says no" >&2
  exit 2
fi
{{ printf 'FAKECUBIN\n'; cat "$src"; }} > "$out"
"#,
        log = log.display()
    );
    write(&nvcc, &script);
    fs::set_permissions(&nvcc, fs::Permissions::from_mode(0o755)).expect("chmod nvcc");
    write(&root.join("include").join("cuda_runtime.h"), "// fake\n");
    nvcc
}

/// How many times the fake nvcc under `root` compiled something.
pub(crate) fn fake_compiles(root: &Path) -> usize {
    fs::read_to_string(root.join("invocations")).map(|t| t.lines().count()).unwrap_or(0)
}

/// An NCCL include directory at `dir` whose `nccl.h` declares `code`, with `nccl_device.h` when `device_api`.
pub(crate) fn fake_nccl_include(dir: &Path, code: i32, device_api: bool) -> PathBuf {
    write(&dir.join("nccl.h"), &format!("#ifndef NCCL_H_\n#define NCCL_VERSION_CODE {code}\n#endif\n"));
    if device_api {
        write(&dir.join("nccl_device.h"), "// fake\n");
    }
    dir.to_path_buf()
}
