use std::os::unix::fs::PermissionsExt;

use super::*;
use crate::jit::test_support::write;

fn paths(candidates: &[Candidate]) -> Vec<(PathBuf, Origin)> {
    candidates.iter().map(|c| (c.path.clone(), c.origin)).collect()
}

/// A `python3` stand-in that prints `wheel` the way `import nvidia.nccl` would, or fails when `wheel` is None.
fn fake_python(dir: &Path, wheel: Option<&Path>) -> PathBuf {
    let python = dir.join("python3");
    let body = match wheel {
        Some(wheel) => format!("#!/bin/sh\necho '{}'\n", wheel.display()),
        None => "#!/bin/sh\necho 'ModuleNotFoundError' >&2\nexit 1\n".to_string(),
    };
    write(&python, &body);
    fs::set_permissions(&python, fs::Permissions::from_mode(0o755)).unwrap();
    python
}

#[test]
fn libnccl_is_looked_for_in_documented_order() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let wheel = r.join("site-packages/nvidia/nccl");
    fs::create_dir_all(&wheel).unwrap();
    let mut env = Environment::isolated(r);
    env.nccl_home = Some(r.join("nccl-home"));
    env.ld_library_path = Some(std::env::join_paths([r.join("a"), PathBuf::new(), r.join("b")]).unwrap());
    env.python = Some(fake_python(r, Some(&wheel)));
    env.linker_libnccl = Some(PathBuf::from(LIBNCCL_SONAME));
    assert_eq!(
        paths(&env.libnccl_candidates()),
        vec![
            (r.join("nccl-home/lib/libnccl.so.2"), Origin::Variable("NCCL_HOME")),
            (r.join("a/libnccl.so.2"), Origin::Variable("LD_LIBRARY_PATH")),
            (r.join("b/libnccl.so.2"), Origin::Variable("LD_LIBRARY_PATH")),
            (wheel.join("lib/libnccl.so.2"), Origin::PipWheel),
            (PathBuf::from("libnccl.so.2"), Origin::DynamicLinker),
        ],
        "an empty LD_LIBRARY_PATH entry is skipped, not read as the current directory"
    );

    // No wheel installed (python3 fails), or no python3 at all: that step is simply absent.
    env.python = Some(fake_python(&r.join("other"), None));
    assert!(!env.libnccl_candidates().iter().any(|c| c.origin == Origin::PipWheel));
    env.python = Some(r.join("no/such/python3"));
    assert_eq!(env.libnccl_candidates().len(), 4);

    // WEFT_LIBNCCL names the library: nothing else is a candidate.
    env.weft_libnccl = Some(r.join("chosen/libnccl.so.2"));
    assert_eq!(
        paths(&env.libnccl_candidates()),
        vec![(r.join("chosen/libnccl.so.2"), Origin::Variable("WEFT_LIBNCCL"))]
    );
}

#[test]
fn nvcc_candidates_carry_where_they_came_from() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let mut env = Environment::isolated(r);
    let provisioned = r.join("weft-toolchain/venv/lib/python3.11/site-packages/nvidia/cu13/bin/nvcc");
    write(&provisioned, "");
    assert_eq!(env.nvcc().unwrap(), Candidate { path: provisioned.clone(), origin: Origin::Provisioned });
    // WEFT_TOOLCHAIN_DIR moves the provisioned toolchain.
    env.weft_toolchain_dir = Some(r.join("elsewhere"));
    assert_eq!(env.toolchain_dir(), r.join("elsewhere"));
    let Err(Missing::NotFound { searched }) = env.nvcc() else { panic!("found an nvcc in an empty environment") };
    assert_eq!(
        searched,
        vec![r.join("elsewhere/venv/lib/python3*/site-packages/nvidia/cu13/bin/nvcc"), r.join("system-cuda/bin/nvcc")]
    );
    env.weft_nvcc = Some(r.join("missing/nvcc"));
    assert_eq!(
        env.nvcc(),
        Err(Missing::BadOverride { variable: "WEFT_NVCC", path: r.join("missing/nvcc"), problem: "is not a file" })
    );
}

#[test]
fn the_cache_directory_is_weft_cache_dir_else_the_users_cache() {
    let root = tempfile::tempdir().unwrap();
    let mut env = Environment::isolated(root.path());
    assert_eq!(env.cache_dir(), None, "no HOME, no WEFT_CACHE_DIR");
    env.user_cache_dir = Some(root.path().join("home/.cache"));
    assert_eq!(
        env.cache_dir(),
        Some(CacheDir {
            dir: root.path().join("home/.cache/weft/kernels"),
            owned_root: root.path().join("home/.cache/weft"),
            origin: Origin::UserCacheDir
        })
    );
    env.weft_cache_dir = Some(root.path().join("mine"));
    assert_eq!(
        env.cache_dir(),
        Some(CacheDir {
            dir: root.path().join("mine"),
            owned_root: root.path().join("mine"),
            origin: Origin::Variable("WEFT_CACHE_DIR")
        })
    );
}

/// `value_of` knows every listed variable, so a report built from [`VARIABLES`] shows each one's value.
#[test]
fn every_listed_variable_has_a_field() {
    let root = tempfile::tempdir().unwrap();
    let isolated = Environment::isolated(root.path());
    let mut set = isolated.clone();
    set.weft_libnccl = Some("/x/libnccl.so.2".into());
    set.nccl_home = Some("/x".into());
    set.ld_library_path = Some("/x/lib".into());
    set.weft_nccl_include = Some("/x/include".into());
    set.weft_nvcc = Some("/x/nvcc".into());
    set.cuda_home = Some("/x/cuda".into());
    set.path = Some("/x/bin".into());
    set.weft_toolchain_dir = Some("/x/toolchain".into());
    set.weft_cache_dir = Some("/x/cache".into());
    for variable in VARIABLES {
        assert_eq!(isolated.value_of(variable.name), None, "{}", variable.name);
        let value = set.value_of(variable.name).unwrap_or_else(|| panic!("{} has no field", variable.name));
        assert!(value.starts_with("/x"), "{}: {value}", variable.name);
    }
    let names: Vec<&str> = VARIABLES.iter().map(|v| v.name).collect();
    for name in ["WEFT_LIBNCCL", "NCCL_HOME", "LD_LIBRARY_PATH", "WEFT_NVCC", "CUDA_HOME", "WEFT_TOOLCHAIN_DIR"] {
        assert!(names.contains(&name), "{name}");
    }
    assert!(names.contains(&"WEFT_NCCL_INCLUDE") && names.contains(&"WEFT_CACHE_DIR"));
}
