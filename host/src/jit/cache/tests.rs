use std::fs;
use std::path::Path;

use super::*;
use crate::jit::test_support::{fake_compiles, fake_cuda, fake_nccl_include, minimal_cubin};
use crate::jit::GpuArch;

const SOURCE: &str = "#include \"weft.cuh\"\nextern \"C\" __global__ void k() {}\n";
const HEADER: &str = "// weft.cuh (test)\n";

/// A toolchain whose nvcc is the fake script under `root/cuda`.
fn fake_toolchain(root: &Path) -> Toolchain {
    let nvcc = fake_cuda(&root.join("cuda"));
    let include = fake_nccl_include(&root.join("nccl"), 22809, true);
    Toolchain::from_paths(nvcc, include, None).unwrap()
}

fn request(source: &str) -> CompileRequest<'_> {
    CompileRequest::new("k", source, HEADER, GpuArch::SM_90)
}

#[test]
fn the_key_changes_with_every_input() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let base = CacheKey::new(&tc, &request(SOURCE));
    assert_eq!(base, CacheKey::new(&tc, &request(SOURCE)), "the key is deterministic");
    assert_eq!(base.to_hex().len(), 64);

    let mut changed = vec![
        CacheKey::new(&tc, &request("other source")),
        CacheKey::new(&tc, &CompileRequest { weft_header: "// other header", ..request(SOURCE) }),
        CacheKey::new(&tc, &request(SOURCE).with_flags(&["-lineinfo"])),
        CacheKey::new(&tc, &CompileRequest { arch: GpuArch { major: 10, minor: 0 }, ..request(SOURCE) }),
    ];
    let other_nvcc = Toolchain { nvcc_version: format!("{} (patched)", tc.nvcc_version), ..tc.clone() };
    changed.push(CacheKey::new(&other_nvcc, &request(SOURCE)));
    let other_nccl = Toolchain { nccl_version: crate::version::Version::new(2, 32, 3), ..tc.clone() };
    changed.push(CacheKey::new(&other_nccl, &request(SOURCE)));
    // The kernel's name is only a label: renaming a kernel with identical source reuses the cubin.
    assert_eq!(base, CacheKey::new(&tc, &CompileRequest { name: "renamed", ..request(SOURCE) }));
    for (i, key) in changed.iter().enumerate() {
        assert_ne!(*key, base, "input {i} did not change the key");
        for other in &changed[i + 1..] {
            assert_ne!(key, other);
        }
    }
}

#[test]
fn field_boundaries_are_part_of_the_key() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let a = CacheKey::new(&tc, &CompileRequest::new("k", "ab", "c", GpuArch::SM_90));
    let b = CacheKey::new(&tc, &CompileRequest::new("k", "a", "bc", GpuArch::SM_90));
    assert_ne!(a, b);
}

#[test]
fn entries_round_trip_and_damage_is_detected() {
    let cubin = b"\x7fELF pretend cubin".to_vec();
    let entry = encode_entry(&cubin);
    assert_eq!(decode_entry(&entry).unwrap(), cubin.as_slice());
    assert!(decode_entry(&entry[..entry.len() - 1]).unwrap_err().contains("trailer"));
    assert!(decode_entry(&entry[..10]).unwrap_err().contains("shorter"));
    assert!(decode_entry(&cubin).is_err(), "a bare cubin is not trusted");
    let mut flipped = entry.clone();
    flipped[3] ^= 1;
    assert!(decode_entry(&flipped).unwrap_err().contains("SHA-256"));
    let mut lying = entry[1..].to_vec();
    lying.splice(0..0, [0u8; 0]);
    assert!(decode_entry(&lying).is_err());
    let empty = encode_entry(&[]);
    assert_eq!(decode_entry(&empty).unwrap(), b"");
}

#[test]
fn atomic_writes_leave_no_temporaries_and_replace_whole_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub/entry.cubin");
    write_atomically(&path, b"first").unwrap();
    write_atomically(&path, b"second, longer").unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"second, longer");
    let names: Vec<_> = fs::read_dir(dir.path().join("sub")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("entry.cubin")]);
}

#[test]
fn concurrent_writers_of_one_entry_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.cubin");
    let entry = encode_entry(&vec![7u8; 1 << 16]);
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    write_atomically(&path, &entry).unwrap();
                    let read = fs::read(&path).unwrap();
                    assert!(decode_entry(&read).is_ok(), "a reader saw a partial entry");
                }
            });
        }
    });
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "temporaries left behind");
}

#[test]
fn a_miss_compiles_then_memory_and_disk_hit() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    let cold = cache.get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!(cold.origin, CacheOrigin::Compiled);
    assert!(!cold.from_cache());
    assert!(cold.cubin.starts_with(&minimal_cubin()) && cold.cubin.ends_with(SOURCE.as_bytes()));
    assert_eq!(cold.path, cache.dir().join(format!("{}.cubin", cold.key)));
    assert_eq!(fs::read_to_string(&cold.source_path).unwrap(), SOURCE);
    assert_eq!(decode_entry(&fs::read(&cold.path).unwrap()).unwrap(), &cold.cubin[..]);

    let memo = cache.get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!((memo.origin, &memo.cubin), (CacheOrigin::Memory, &cold.cubin));

    let fresh_process = KernelCache::new(cache.dir());
    let disk = fresh_process.get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!((disk.origin, &disk.cubin), (CacheOrigin::Disk, &cold.cubin));
    assert_eq!(fake_compiles(&root.path().join("cuda")), 1, "nvcc ran once");
}

/// A launch on aligned arguments and one on an odd sub-slice run two compiled forms of one source: two entries,
/// each compiled once, the aligned one with the define `weft.cuh` reads.
#[test]
fn the_two_argument_forms_are_two_entries_compiled_once_each() {
    use crate::jit::ArgAlignment::{Aligned16, Any};
    assert_eq!(Aligned16.and(0x7f00_0000_0100), Aligned16);
    assert_eq!(Aligned16.and(0x7f00_0000_0104), Any, "an f32 sub-slice starting one element in");
    assert_eq!(Any.and(0x7f00_0000_0100), Any, "one unaligned argument decides");
    assert_eq!(crate::jit::ArgAlignment::default(), Aligned16);

    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    let aligned = request(SOURCE).with_flags(Aligned16.flags());
    let any = request(SOURCE).with_flags(Any.flags());
    assert!(aligned.flags().iter().any(|f| f == "-DWEFT_ALIGNED_ARGS=1"));
    assert!(!any.flags().iter().any(|f| f.contains("WEFT_ALIGNED_ARGS")));
    let (a, b) = (cache.get_or_compile(&tc, &aligned).unwrap(), cache.get_or_compile(&tc, &any).unwrap());
    assert_ne!(a.key, b.key);
    assert_eq!((a.origin, b.origin), (CacheOrigin::Compiled, CacheOrigin::Compiled));
    assert_eq!(cache.get_or_compile(&tc, &aligned).unwrap().origin, CacheOrigin::Memory);
    assert_eq!(fake_compiles(&root.path().join("cuda")), 2);
}

#[test]
fn the_weft_header_is_on_the_include_path() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    cache.get_or_compile(&tc, &request(SOURCE)).unwrap();
    let args = fs::read_to_string(root.path().join("cuda/invocations")).unwrap();
    let include = args.split(' ').find_map(|a| a.strip_prefix("-I")).expect("an -I flag");
    assert_eq!(fs::read_to_string(Path::new(include).join("weft.cuh")).unwrap(), HEADER);
    assert!(include.starts_with(cache.dir().join("include").to_str().unwrap()), "{include}");
}

#[test]
fn a_truncated_entry_is_recompiled_not_trusted() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let dir = root.path().join("cache");
    let first = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
    let stored = fs::read(&first.path).unwrap();
    fs::write(&first.path, &stored[..stored.len() / 2]).unwrap();

    let again = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!(again.origin, CacheOrigin::Compiled);
    assert_eq!(again.cubin, first.cubin);
    assert_eq!(fs::read(&first.path).unwrap(), stored, "the entry was rewritten whole");
    assert_eq!(fake_compiles(&root.path().join("cuda")), 2);

    let mut corrupt = stored.clone();
    corrupt[0] ^= 0xff;
    fs::write(&first.path, &corrupt).unwrap();
    let third = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!((third.origin, fake_compiles(&root.path().join("cuda"))), (CacheOrigin::Compiled, 3));
}

#[test]
fn compile_errors_carry_the_kernel_the_source_and_the_log() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    let source = "#include \"weft.cuh\"\n#error nope\n";
    let err = cache.get_or_compile(&tc, &CompileRequest::new("broken", source, HEADER, GpuArch::SM_90)).unwrap_err();
    let text = err.to_string();
    let JitError::CompileFailed { kernel, source_path, log_path, output, .. } = err else {
        panic!("expected CompileFailed, got {text}");
    };
    assert_eq!(kernel, "broken");
    assert_eq!(fs::read_to_string(&source_path).unwrap(), source);
    assert_eq!(fs::read_to_string(&log_path).unwrap(), output);
    assert!(output.contains("note: preamble") && text.contains("error: the kernel says no"), "{output}");
    assert!(text.contains("`broken`") && text.contains(source_path.to_str().unwrap()), "{text}");
    let leftovers: Vec<_> = fs::read_dir(cache.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.ends_with(".cubin"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn threads_asking_for_one_kernel_compile_it_once() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| cache.get_or_compile(&tc, &request(SOURCE)).unwrap());
        }
    });
    assert_eq!(fake_compiles(&root.path().join("cuda")), 1);
}

/// The checksum proves the entry is what was stored, not that it is safe to load: an entry holding a
/// checksum-valid but malformed cubin is recompiled, never handed on.
#[test]
fn a_checksummed_but_malformed_entry_is_recompiled_not_trusted() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let dir = root.path().join("cache");
    let first = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
    let stored = fs::read(&first.path).unwrap();

    let mut bad_machine = first.cubin.to_vec();
    bad_machine[18] = 62; // EM_X86_64
    let mut table_out_of_bounds = first.cubin.to_vec();
    table_out_of_bounds[40..48].copy_from_slice(&u64::MAX.to_le_bytes());
    for (round, malformed) in [b"not an ELF image at all".to_vec(), bad_machine, table_out_of_bounds].iter().enumerate()
    {
        fs::write(&first.path, encode_entry(malformed)).unwrap();
        assert!(decode_entry(&fs::read(&first.path).unwrap()).is_ok(), "the checksum matches");
        let again = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
        assert_eq!(again.origin, CacheOrigin::Compiled, "round {round}");
        assert_eq!(again.cubin, first.cubin);
        assert_eq!(fs::read(&first.path).unwrap(), stored, "the entry was replaced");
        assert_eq!(fake_compiles(&root.path().join("cuda")), round + 2);
    }
}

#[test]
fn nvcc_output_that_is_not_a_cubin_is_a_typed_error() {
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let cache = KernelCache::new(root.path().join("cache"));
    let source = "#include \"weft.cuh\"\n// WEFT_TEST_MALFORMED\n";
    let err = cache.get_or_compile(&tc, &CompileRequest::new("odd", source, HEADER, GpuArch::SM_90)).unwrap_err();
    let text = err.to_string();
    let JitError::MalformedCubin { kernel, path, problem } = err else {
        panic!("expected MalformedCubin, got {text}");
    };
    assert_eq!(kernel, "odd");
    assert!(problem.contains("shorter than an ELF header"), "{problem}");
    assert_eq!(fs::read(&path).unwrap(), b"FAKECUBIN\n", "nvcc's output is kept for inspection");
    assert!(text.contains("WEFT_NVCC") && text.contains(path.to_str().unwrap()), "{text}");
    let entries: Vec<_> = fs::read_dir(cache.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.ends_with(".cubin"))
        .collect();
    assert!(entries.is_empty(), "nothing was cached: {entries:?}");
    // Nothing was memoised either: the next request runs nvcc again.
    let _ = cache.get_or_compile(&tc, &CompileRequest::new("odd", source, HEADER, GpuArch::SM_90));
    assert_eq!(fake_compiles(&root.path().join("cuda")), 2);
}

#[test]
fn the_cache_is_created_private_and_a_writable_one_is_never_read() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let root = tempfile::tempdir().unwrap();
    let tc = fake_toolchain(root.path());
    let dir = root.path().join("made/by/weft");
    let cache = KernelCache::new(&dir);
    assert!(!cache.check_dir().unwrap());
    let cold = cache.get_or_compile(&tc, &request(SOURCE)).unwrap();
    for made in ["made", "made/by", "made/by/weft", "made/by/weft/src", "made/by/weft/include"] {
        assert_eq!(mode(&root.path().join(made)), 0o700, "{made}");
    }
    assert!(cache.check_dir().unwrap());

    // Someone opens the directory up: a fresh process (a new cache object) refuses to read the entry.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let err = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, JitError::CacheDirInsecure { .. }), "{text}");
    assert!(text.contains(&format!("chmod 700 {}", dir.display())), "{text}");
    assert_eq!(fake_compiles(&root.path().join("cuda")), 1, "nothing compiled either");
    assert!(KernelCache::new(&dir).check_dir().is_err());
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let warm = KernelCache::new(&dir).get_or_compile(&tc, &request(SOURCE)).unwrap();
    assert_eq!((warm.origin, warm.cubin), (CacheOrigin::Disk, cold.cubin));
}
