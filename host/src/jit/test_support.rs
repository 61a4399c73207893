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
/// nvcc-like message when the `.cu` contains `#error`, writes a non-ELF file when it contains
/// `WEFT_TEST_MALFORMED`, and else writes [`minimal_cubin`] followed by `FAKECUBIN` and the source to `-o` (so
/// different sources give different cubins, and all of them pass the ELF check).
pub(crate) fn fake_cuda(root: &Path) -> PathBuf {
    let nvcc = root.join("bin").join("nvcc");
    let log = root.join("invocations");
    let template = root.join("template.cubin");
    fs::create_dir_all(root).expect("create fake CUDA root");
    fs::write(&template, minimal_cubin()).expect("write the template cubin");
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
if grep -q 'WEFT_TEST_MALFORMED' "$src"; then
  printf 'FAKECUBIN\n' > "$out"; exit 0
fi
{{ cat "{template}"; printf 'FAKECUBIN\n'; cat "$src"; }} > "$out"
"#,
        log = log.display(),
        template = template.display()
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

/// The smallest cubin-shaped ELF that [`super::elf::check_cubin`] accepts: EM_CUDA, a section name table, a
/// string table, a symbol table naming one kernel, one code section and a program header loading it. The fake
/// nvcc copies it in front of its output, so the cache tests run on bytes that pass the check.
///
/// Layout: header (64 bytes), program header (56), `.shstrtab`, `.strtab`, `.symtab`, `.text.k`, then the five
/// section headers (null, `.shstrtab`, `.strtab`, `.symtab`, `.text.k`).
pub(crate) fn minimal_cubin() -> Vec<u8> {
    let names = b"\0.shstrtab\0.strtab\0.symtab\0.text.k\0";
    let strings = b"\0k\0";
    let code = [0u8; 16];
    let mut symbols = vec![0u8; 24];
    let mut kernel = [0u8; 24];
    kernel[0..4].copy_from_slice(&1u32.to_le_bytes()); // "k"
    kernel[4] = 0x12; // global function
    kernel[6..8].copy_from_slice(&4u16.to_le_bytes()); // defined in .text.k
    kernel[16..24].copy_from_slice(&(code.len() as u64).to_le_bytes());
    symbols.extend_from_slice(&kernel);

    let phoff = 64u64;
    let names_at = phoff + 56;
    let strings_at = names_at + names.len() as u64;
    let symbols_at = (strings_at + strings.len() as u64).next_multiple_of(8);
    let code_at = symbols_at + symbols.len() as u64;
    let shoff = (code_at + code.len() as u64).next_multiple_of(8);

    let mut elf = vec![0u8; 64];
    elf[0..4].copy_from_slice(b"\x7fELF");
    elf[4] = 2; // 64-bit
    elf[5] = 1; // little-endian
    elf[6] = 1; // version
    elf[7] = 0x33; // CUDA's OS ABI
    elf[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    elf[18..20].copy_from_slice(&super::elf::EM_CUDA.to_le_bytes());
    elf[20..24].copy_from_slice(&1u32.to_le_bytes());
    elf[32..40].copy_from_slice(&phoff.to_le_bytes());
    elf[40..48].copy_from_slice(&shoff.to_le_bytes());
    elf[52..54].copy_from_slice(&64u16.to_le_bytes());
    elf[54..56].copy_from_slice(&56u16.to_le_bytes());
    elf[56..58].copy_from_slice(&1u16.to_le_bytes());
    elf[58..60].copy_from_slice(&64u16.to_le_bytes());
    elf[60..62].copy_from_slice(&5u16.to_le_bytes());
    elf[62..64].copy_from_slice(&1u16.to_le_bytes());

    let mut program = [0u8; 56];
    program[0..4].copy_from_slice(&1u32.to_le_bytes()); // PT_LOAD
    program[8..16].copy_from_slice(&code_at.to_le_bytes());
    program[32..40].copy_from_slice(&(code.len() as u64).to_le_bytes());
    program[40..48].copy_from_slice(&(code.len() as u64).to_le_bytes());
    elf.extend_from_slice(&program);

    elf.extend_from_slice(names);
    elf.extend_from_slice(strings);
    elf.resize(symbols_at as usize, 0);
    elf.extend_from_slice(&symbols);
    elf.extend_from_slice(&code);
    elf.resize(shoff as usize, 0);

    let section = |name: u32, kind: u32, offset: u64, size: u64, link: u32, entry: u64| {
        let mut header = [0u8; 64];
        header[0..4].copy_from_slice(&name.to_le_bytes());
        header[4..8].copy_from_slice(&kind.to_le_bytes());
        header[24..32].copy_from_slice(&offset.to_le_bytes());
        header[32..40].copy_from_slice(&size.to_le_bytes());
        header[40..44].copy_from_slice(&link.to_le_bytes());
        header[56..64].copy_from_slice(&entry.to_le_bytes());
        header
    };
    elf.extend_from_slice(&[0u8; 64]);
    elf.extend_from_slice(&section(1, 3, names_at, names.len() as u64, 0, 0));
    elf.extend_from_slice(&section(11, 3, strings_at, strings.len() as u64, 0, 0));
    elf.extend_from_slice(&section(19, 2, symbols_at, symbols.len() as u64, 2, 24));
    elf.extend_from_slice(&section(27, 1, code_at, code.len() as u64, 0, 0));
    elf
}
