use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use crate::probe::Gpu;
use crate::toolchain::workspace_root;

/// The pinned libnccl 2.28.9 and nvcc that `cargo xtask test` provisions and exports.
fn provisioned() -> (PathBuf, PathBuf) {
    let var = |name: &str| {
        std::env::var_os(name).map(PathBuf::from).unwrap_or_else(|| {
            panic!("{name} is not set: run the tests through `cargo xtask test`, which provisions it")
        })
    };
    (var("WEFT_TEST_LIBNCCL_2_28_9"), var("WEFT_NVCC"))
}

fn no_gpu() -> Probes {
    Probes { driver: Err(DriverProblem::NoDriver("libcuda.so.1: cannot open shared object file".into())), gcc: None }
}

fn one_h100() -> Probes {
    let gpu = Gpu { ordinal: 0, name: "NVIDIA H100".into(), compute_capability: (9, 0) };
    Probes { driver: Ok(DriverReport { driver_version: Some(13000), gpus: vec![gpu] }), gcc: Some("gcc 12.2".into()) }
}

/// Nothing of the machine's own installs, and a private user cache directory under `root`.
fn isolated(root: &Path) -> Environment {
    let mut env = Environment::isolated(root);
    env.user_cache_dir = Some(root.join("home/.cache"));
    env
}

/// An environment with everything a GPU run needs, from the provisioned toolchain.
fn complete(root: &Path) -> Environment {
    let (libnccl, nvcc) = provisioned();
    let mut env = isolated(root);
    env.weft_libnccl = Some(libnccl);
    env.weft_nvcc = Some(nvcc);
    env
}

/// Every ✗ line names its fix: on its `fix:` line, or in weft's own error text.
fn assert_every_problem_has_a_fix(text: &str) {
    let lines: Vec<&str> = text.lines().collect();
    for (at, line) in lines.iter().enumerate() {
        if !line.trim_start().starts_with('✗') {
            continue;
        }
        let next_is_fix = lines.get(at + 1).is_some_and(|next| next.trim_start().starts_with("fix: "));
        let names_fix = ["set WEFT_", "set CUDA_HOME", "cargo xtask provision", "chmod 700", "fix it or unset it"]
            .iter()
            .any(|fix| line.contains(fix));
        assert!(next_is_fix || names_fix, "a problem without its fix: {line}\n\n{text}");
    }
}

fn assert_speaks_to_the_users_machine(text: &str) {
    for lab in ["H200", "GPU machine", "CEO", "gpu-pack", "../shared", "shared/tools", "the lab"] {
        assert!(!text.contains(lab), "mentions {lab:?}:\n{text}");
    }
}

#[test]
fn a_machine_without_anything_fails_and_every_problem_names_its_fix() {
    let root = tempfile::tempdir().unwrap();
    let env = isolated(root.path());
    let (problems, text) = report_text(&env, no_gpu());
    // libnccl, NCCL headers, nvcc, gcc, the driver.
    assert_eq!(problems, 5, "{text}");
    assert_eq!(text.matches("  ✗ ").count(), 5, "{text}");
    assert!(text.contains("no libnccl could be loaded") && text.contains("pip install nvidia-nccl-cu13"), "{text}");
    assert!(text.contains("NCCL headers (nccl.h) not found"), "{text}");
    assert!(text.contains("nvcc not found") && text.contains("cargo xtask provision"), "{text}");
    assert!(text.contains("no CUDA driver on this machine") && text.contains("driver 580"), "{text}");
    assert!(text.contains("doctor: 5 problems") && text.contains("would fail on this machine"), "{text}");
    assert_every_problem_has_a_fix(&text);
    assert_speaks_to_the_users_machine(&text);
    assert!(!root.path().join("home").exists(), "doctor created the cache directory");
}

#[test]
fn every_discovery_variable_is_reported_and_documented() {
    let root = tempfile::tempdir().unwrap();
    let mut env = isolated(root.path());
    let (_, unset) = report_text(&env, no_gpu());
    env.nccl_home = Some(root.path().join("my-nccl"));
    env.weft_cache_dir = Some(root.path().join("my-cache"));
    let (_, set) = report_text(&env, no_gpu());
    let docs = fs::read_to_string(workspace_root().join("docs/toolchain.md")).unwrap();
    for variable in VARIABLES {
        assert!(unset.contains(&format!("· {} unset\n      {}", variable.name, variable.effect)), "{unset}");
    }
    // Read from the process, so set or not depending on who runs the tests.
    for name in ["WEFT_PRINT_CUDA", "WEFT_SKIP_PROVISION"] {
        assert!(unset.contains(&format!("· {name}")), "{name} missing from the report");
    }
    for name in VARIABLES.iter().map(|v| v.name).chain(["WEFT_PRINT_CUDA", "WEFT_SKIP_PROVISION"]) {
        assert!(docs.contains(&format!("`{name}")), "{name} is not in docs/toolchain.md");
    }
    assert!(set.contains(&format!("NCCL_HOME={}", root.path().join("my-nccl").display())), "{set}");
    assert!(set.contains(&format!("WEFT_CACHE_DIR={}", root.path().join("my-cache").display())), "{set}");
}

#[test]
fn a_complete_machine_passes() {
    let root = tempfile::tempdir().unwrap();
    let (problems, text) = report_text(&complete(root.path()), one_h100());
    assert_eq!(problems, 0, "{text}");
    assert!(!text.contains('✗'), "{text}");
    assert!(text.contains("✓ libnccl 2.28.9 at") && text.contains("(from WEFT_LIBNCCL)"), "{text}");
    assert!(text.contains("✓ NCCL 2.28.9 headers at") && text.contains("(from beside the loaded libnccl)"), "{text}");
    assert!(text.contains("(from WEFT_NVCC): release 13.0"), "{text}");
    assert!(text.contains("✓ CUDA headers beside it"), "{text}");
    assert!(text.contains("✓ GPU 0: NVIDIA H100 (compute capability 9.0, sm_90; driver CUDA 13.0)"), "{text}");
    assert!(text.contains("the first compile creates it, mode 0700"), "{text}");
    assert!(text.contains("doctor: no problems"), "{text}");
    assert_speaks_to_the_users_machine(&text);
}

#[test]
fn headers_of_another_release_are_the_runtimes_error() {
    let root = tempfile::tempdir().unwrap();
    let mut env = complete(root.path());
    let libnccl = env.weft_libnccl.clone().unwrap();
    let other = libnccl.to_string_lossy().replace("nccl-2.28.9", "nccl-2.32.3");
    env.weft_nccl_include = Some(Path::new(&other).parent().unwrap().parent().unwrap().join("include"));
    let (problems, text) = report_text(&env, one_h100());
    assert_eq!(problems, 1, "{text}");
    assert!(
        text.contains("are 2.32.3 but the loaded libnccl is 2.28.9: set WEFT_NCCL_INCLUDE (or NCCL_HOME) to the include dir of NCCL 2.28.9"),
        "{text}"
    );
    assert_every_problem_has_a_fix(&text);
}

#[test]
fn the_library_a_program_loads_is_the_one_reported_and_the_rest_are_shadowed() {
    let root = tempfile::tempdir().unwrap();
    let (libnccl, nvcc) = provisioned();
    let newer = PathBuf::from(libnccl.to_string_lossy().replace("nccl-2.28.9", "nccl-2.32.3"));
    let mut env = isolated(root.path());
    env.weft_nvcc = Some(nvcc);
    env.nccl_home = Some(libnccl.parent().unwrap().parent().unwrap().to_path_buf());
    env.ld_library_path = Some(newer.parent().unwrap().as_os_str().to_owned());
    let (problems, text) = report_text(&env, one_h100());
    assert_eq!(problems, 0, "{text}");
    assert!(text.contains("✓ libnccl 2.28.9 at") && text.contains("(from NCCL_HOME)"), "{text}");
    assert!(text.contains(&format!("also present, not used: {} (from LD_LIBRARY_PATH)", newer.display())), "{text}");
    // The runtime agrees.
    let (library, origin) = weft_host::sys::search(&env).found.unwrap();
    assert_eq!((library.version(), origin), (Version::new(2, 28, 9), Origin::Variable("NCCL_HOME")));
}

#[test]
fn a_wrong_weft_libnccl_is_a_problem_even_with_a_good_library_elsewhere() {
    let root = tempfile::tempdir().unwrap();
    let mut env = complete(root.path());
    env.nccl_home = env.weft_libnccl.as_ref().and_then(|lib| lib.parent()?.parent()).map(Path::to_path_buf);
    env.weft_libnccl = Some(root.path().join("typo/libnccl.so.2"));
    let (problems, text) = report_text(&env, one_h100());
    assert!(text.contains("WEFT_LIBNCCL=") && text.contains("could not be loaded"), "{text}");
    assert!(text.contains("fix: point WEFT_LIBNCCL at a libnccl.so.2 that loads, or unset it"), "{text}");
    // Only libnccl: NCCL_HOME's headers are found, with nothing loaded to compare them with.
    assert_eq!(problems, 1, "{text}");
    assert!(text.contains("no libnccl to compare them with"), "{text}");
    assert_every_problem_has_a_fix(&text);
}

#[test]
fn a_cache_others_can_write_is_a_problem_with_the_chmod_fix() {
    let root = tempfile::tempdir().unwrap();
    let cache = root.path().join("cache");
    fs::create_dir(&cache).unwrap();
    let mut env = isolated(root.path());
    env.weft_cache_dir = Some(cache.clone());
    let (private, text) = report_text(&env, no_gpu());
    assert!(text.contains("private to this user") && text.contains("(from WEFT_CACHE_DIR)"), "{text}");
    fs::set_permissions(&cache, fs::Permissions::from_mode(0o777)).unwrap();
    let (open, text) = report_text(&env, no_gpu());
    assert_eq!(open, private + 1, "{text}");
    assert!(text.contains(&format!("chmod 700 {}", cache.display())), "{text}");
    assert_eq!(fs::metadata(&cache).unwrap().permissions().mode() & 0o777, 0o777, "doctor changes nothing");
}

/// Text in branches the tests above do not reach is user-facing too.
#[test]
fn no_text_in_doctor_speaks_of_a_particular_lab() {
    assert_speaks_to_the_users_machine(include_str!("../doctor.rs"));
}
