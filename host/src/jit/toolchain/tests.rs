use std::path::{Path, PathBuf};

use super::*;
use crate::jit::test_support::{fake_cuda, fake_nccl_include, write};

const V2_28_9: Version = Version::new(2, 28, 9);

fn empty_env(root: &Path) -> Environment {
    let mut env = Environment::isolated(root);
    env.default_toolchain_dir = root.join("no-toolchain");
    env.system_cuda = root.join("no-system-cuda");
    env.system_include = root.join("no-system-include");
    env
}

#[test]
fn nccl_version_code_is_read_from_the_define() {
    assert_eq!(parse_nccl_version_code("#define NCCL_MAJOR 2\n#define NCCL_VERSION_CODE 22809\n"), Some(22809));
    assert_eq!(parse_nccl_version_code("  #  define   NCCL_VERSION_CODE\t23203 // 2.32.3\n"), Some(23203));
    assert_eq!(parse_nccl_version_code("#define NCCL_VERSION_CODE_X 1\n#define NCCL_VERSION(X,Y,Z) 0\n"), None);
    assert_eq!(parse_nccl_version_code("int NCCL_VERSION_CODE = 3;\n"), None);
    assert_eq!(parse_nccl_version_code(""), None);
}

#[test]
fn nccl_version_code_is_read_from_real_headers_when_present() {
    for (code, dir) in
        [(22809, "/tmp/tc/nccl-2.28.9/nvidia/nccl/include"), (23203, "/tmp/tc/nccl-2.32.3/nvidia/nccl/include")]
    {
        if let Ok(text) = std::fs::read_to_string(Path::new(dir).join("nccl.h")) {
            assert_eq!(parse_nccl_version_code(&text), Some(code), "{dir}");
        }
    }
}

#[test]
fn nvcc_release_is_parsed_from_version_output() {
    let text = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0";
    assert_eq!(parse_nvcc_release(text), Some("13.0.88"));
    assert_eq!(parse_nvcc_release("something else"), None);
}

#[test]
fn nvcc_is_looked_for_in_documented_order() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let explicit = fake_cuda(&r.join("explicit"));
    let cuda_home = r.join("cuda-home");
    let from_home = fake_cuda(&cuda_home);
    let on_path = fake_cuda(&r.join("on-path"));
    let toolchain_dir = r.join("weft-toolchain");
    let provisioned = fake_cuda(&toolchain_dir.join("venv/lib/python3.12/site-packages/nvidia/cu13"));
    let system = fake_cuda(&r.join("system-cuda"));

    let mut env = Environment {
        weft_nvcc: Some(explicit.clone()),
        cuda_home: Some(cuda_home),
        path: Some(std::env::join_paths([r.join("empty"), on_path.parent().unwrap().to_path_buf()]).unwrap()),
        default_toolchain_dir: toolchain_dir,
        system_cuda: r.join("system-cuda"),
        ..empty_env(r)
    };
    assert_eq!(find_nvcc(&env).unwrap().path, explicit);
    env.weft_nvcc = None;
    assert_eq!(find_nvcc(&env).unwrap().path, from_home);
    env.cuda_home = Some(r.join("cuda-home-without-nvcc"));
    assert_eq!(find_nvcc(&env).unwrap().path, on_path);
    env.path = None;
    assert_eq!(find_nvcc(&env).unwrap().path, provisioned);
    env.default_toolchain_dir = r.join("not-provisioned");
    assert_eq!(find_nvcc(&env).unwrap().path, system);
    env.system_cuda = r.join("no-system-cuda");
    let err = find_nvcc(&env).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, JitError::NvccNotFound { ref searched } if searched.len() == 3), "{text}");
    assert!(text.contains("WEFT_NVCC") && text.contains("python3*") && text.contains("no-system-cuda"), "{text}");
}

#[test]
fn a_wrong_weft_nvcc_is_an_error_not_a_fallthrough() {
    let root = tempfile::tempdir().unwrap();
    let env = Environment {
        weft_nvcc: Some(root.path().join("missing/nvcc")),
        system_cuda: root.path().join("system-cuda"),
        ..empty_env(root.path())
    };
    fake_cuda(&root.path().join("system-cuda"));
    let text = find_nvcc(&env).unwrap_err().to_string();
    assert!(text.starts_with("WEFT_NVCC is set to") && text.contains("missing/nvcc"), "{text}");
}

#[test]
fn cuda_include_is_found_beside_nvcc_even_through_a_symlink() {
    let root = tempfile::tempdir().unwrap();
    let nvcc = fake_cuda(&root.path().join("cuda"));
    std::fs::create_dir_all(root.path().join("cuda/include/cccl")).unwrap();
    assert_eq!(find_cuda_include(&nvcc).unwrap(), root.path().join("cuda/include"));

    let link = root.path().join("usr/bin/nvcc");
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&nvcc, &link).unwrap();
    let found = find_cuda_include(&link).unwrap();
    assert_eq!(found, std::fs::canonicalize(root.path().join("cuda/include")).unwrap());

    std::fs::remove_file(root.path().join("cuda/include/cuda_runtime.h")).unwrap();
    let text = find_cuda_include(&link).unwrap_err().to_string();
    assert!(text.contains("CUDA_HOME") && text.contains("usr/include"), "{text}");
}

#[test]
fn nccl_include_is_looked_for_in_documented_order() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let explicit = fake_nccl_include(&r.join("explicit"), 22809, true);
    let home = r.join("nccl-home");
    fake_nccl_include(&home.join("include"), 22809, true);
    let wheel = r.join("site-packages/nvidia/nccl");
    fake_nccl_include(&wheel.join("include"), 22809, true);
    write(&wheel.join("lib/libnccl.so.2"), "");
    let system = fake_nccl_include(&r.join("usr-include"), 22809, true);
    let loaded = LoadedNccl { library: &wheel.join("lib/libnccl.so.2"), version: V2_28_9 };

    let mut env = Environment {
        weft_nccl_include: Some(explicit.clone()),
        nccl_home: Some(home.clone()),
        system_include: system.clone(),
        ..empty_env(r)
    };
    assert_eq!(find_nccl_include(&env, Some(loaded)).unwrap().path, explicit);
    env.weft_nccl_include = None;
    assert_eq!(find_nccl_include(&env, Some(loaded)).unwrap().path, home.join("include"));
    env.nccl_home = Some(r.join("nccl-home-without-headers"));
    assert_eq!(find_nccl_include(&env, Some(loaded)).unwrap().path, wheel.join("include"));
    assert_eq!(find_nccl_include(&env, None).unwrap().path, system);
    env.system_include = r.join("nothing");
    let elsewhere = LoadedNccl { library: &r.join("elsewhere/lib/libnccl.so.2"), version: V2_28_9 };
    let text = find_nccl_include(&env, Some(elsewhere)).unwrap_err().to_string();
    assert!(text.contains("WEFT_NCCL_INCLUDE") && text.contains("(2.28.9)") && text.contains("nothing"), "{text}");

    env.weft_nccl_include = Some(r.join("nccl-home"));
    let text = find_nccl_include(&env, Some(loaded)).unwrap_err().to_string();
    assert!(text.starts_with("WEFT_NCCL_INCLUDE is set to") && text.contains("no nccl.h"), "{text}");
}

#[test]
fn headers_of_another_nccl_release_are_refused_with_the_fix() {
    let root = tempfile::tempdir().unwrap();
    let include = fake_nccl_include(&root.path().join("inc"), 23203, true);
    let err = check_nccl_include(&include, Some(V2_28_9)).unwrap_err();
    let expected = format!(
        "NCCL headers at {} are 2.32.3 but the loaded libnccl is 2.28.9: set WEFT_NCCL_INCLUDE (or NCCL_HOME) to the \
         include dir of NCCL 2.28.9",
        include.display()
    );
    assert_eq!(err.to_string(), expected);
    assert_eq!(check_nccl_include(&include, Some(Version::new(2, 32, 3))).unwrap(), Version::new(2, 32, 3));
    assert_eq!(check_nccl_include(&include, None).unwrap(), Version::new(2, 32, 3));
}

#[test]
fn headers_without_the_device_api_or_a_version_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let old = fake_nccl_include(&root.path().join("old"), 22703, false);
    let text = check_nccl_include(&old, None).unwrap_err().to_string();
    assert!(text.contains("2.27.3") && text.contains("nccl_device.h") && text.contains("2.28"), "{text}");
    let odd = root.path().join("odd");
    write(&odd.join("nccl.h"), "// not really\n");
    assert!(matches!(check_nccl_include(&odd, None), Err(JitError::NcclVersionUnreadable { .. })));
}

#[test]
fn discovery_assembles_a_complete_toolchain() {
    let root = tempfile::tempdir().unwrap();
    let nvcc = fake_cuda(&root.path().join("cuda"));
    std::fs::create_dir_all(root.path().join("cuda/include/cccl")).unwrap();
    let include = fake_nccl_include(&root.path().join("nccl"), 22809, true);
    let env = Environment {
        cuda_home: Some(root.path().join("cuda")),
        weft_nccl_include: Some(include.clone()),
        ..empty_env(root.path())
    };
    let loaded = LoadedNccl { library: Path::new("/nonexistent/lib/libnccl.so.2"), version: V2_28_9 };
    let tc = Toolchain::discover_in(&env, Some(loaded)).unwrap();
    assert_eq!(tc.nvcc, nvcc);
    assert_eq!(tc.cuda_include, root.path().join("cuda/include"));
    assert_eq!(tc.cccl_include, Some(root.path().join("cuda/include/cccl")));
    assert_eq!(tc.nccl_include, include);
    assert_eq!(tc.nccl_version, V2_28_9);
    assert_eq!(tc.nvcc_release(), "13.0.88");
    let _: PathBuf = tc.nvcc;
}
