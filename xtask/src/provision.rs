//! Installing the pinned toolchain with pip, once.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::toolchain::{
    nvcc_version, pinned_spec, read_stamp, stamp_is_current, stamp_text, Toolchain, CUDA_PACKAGES, LAUNCHER_PACKAGES,
    MODEL_PACKAGES, NCCL_PACKAGE, NCCL_VERSIONS, STAMP_FILE,
};
use crate::{run_checked, say};

/// Set to 1 to never run pip (offline use with a toolchain that is already there).
pub const SKIP_ENV: &str = "WEFT_SKIP_PROVISION";

/// Returns the toolchain in `dir` ([`crate::toolchain::toolchain_dir`]), installing it first if its stamp is
/// missing or stale.
pub fn ensure_toolchain(dir: &Path) -> Result<Toolchain> {
    let dir = dir.to_path_buf();
    let spec = pinned_spec();

    if skip_requested() {
        say(&format!("{SKIP_ENV} is set: not running pip"));
        if !stamp_is_current(read_stamp(&dir).as_deref(), &spec) {
            say(&format!("warning: {} has no stamp for the current pins; using what is there", dir.display()));
        }
    } else {
        let parent = dir.parent().context("toolchain dir has no parent")?;
        fs::create_dir_all(parent).with_context(|| format!("cannot create {}", parent.display()))?;
        // Several engineers (and their editors' cargo runs) share this directory: without
        // the lock, a second `cargo xtask test` would wipe a half-done install under the first.
        let lock_path = lock_path(&dir);
        let lock = File::create(&lock_path).with_context(|| format!("cannot create {}", lock_path.display()))?;
        if lock.try_lock().is_err() {
            say("waiting for another cargo xtask to finish provisioning…");
            lock.lock().with_context(|| format!("cannot lock {}", lock_path.display()))?;
        }

        let stamped = stamp_is_current(read_stamp(&dir).as_deref(), &spec);
        let complete = stamped && Toolchain::locate(&dir).is_ok();
        if complete {
            say(&format!("toolchain {} is provisioned (stamp matches pins): skipping pip", dir.display()));
        } else {
            if stamped {
                say("toolchain stamp is current but files are missing: provisioning again");
            }
            provision_from_scratch(&dir, &spec)?;
        }
        // The lock is released when `lock` is dropped here.
    }

    Toolchain::locate(&dir).with_context(|| {
        format!(
            "the toolchain at {} is incomplete; run `cargo xtask test` with network access \
             (and without {SKIP_ENV}), or delete the directory to start over",
            dir.display()
        )
    })
}

/// `<dir>.lock` beside the toolchain (`target/weft-toolchain.lock` for the default location).
fn lock_path(dir: &Path) -> PathBuf {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "weft-toolchain".into());
    dir.with_file_name(format!("{name}.lock"))
}

/// What provisioning itself puts in a toolchain directory; anything else means the directory is not one.
const TOOLCHAIN_ENTRIES: [&str; 4] = ["venv", "smoke", STAMP_FILE, "stamp.tmp"];

/// Refuses to delete a directory that is not a (possibly half-made) toolchain: `WEFT_TOOLCHAIN_DIR` can point
/// anywhere, and starting over deletes the directory.
fn check_replaceable(dir: &Path) -> Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for entry in entries {
        let name = entry.with_context(|| format!("cannot list {}", dir.display()))?.file_name();
        let name = name.to_string_lossy();
        if !TOOLCHAIN_ENTRIES.contains(&name.as_ref()) && !name.starts_with("nccl-") {
            bail!(
                "{} holds {name:?}, which provisioning did not put there, so it will not delete the directory to \
                 start over; point WEFT_TOOLCHAIN_DIR at an empty or new directory (or unset it)",
                dir.display()
            );
        }
    }
    Ok(())
}

fn skip_requested() -> bool {
    std::env::var_os(SKIP_ENV).is_some_and(|value| !value.is_empty() && value != "0")
}

fn provision_from_scratch(dir: &Path, spec: &str) -> Result<()> {
    let started = Instant::now();
    say(&format!("provisioning the CUDA/NCCL toolchain into {}", dir.display()));
    // No stamp means an earlier run stopped somewhere unknown; pip's own state in that venv
    // cannot be trusted to describe the files, so start clean.
    if dir.exists() {
        check_replaceable(dir)?;
        fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;

    let venv = dir.join("venv");
    run_checked(Command::new("python3").arg("-m").arg("venv").arg(&venv)).context(
        "cannot create a Python venv; install python3 with the venv module \
         (Debian/Ubuntu: apt-get install python3-venv)",
    )?;
    let python = venv.join("bin").join("python");

    let pip_fix = "pip failed; check network access to pypi.org (or a configured index), \
                   or set WEFT_SKIP_PROVISION=1 to use an existing toolchain";
    run_checked(pip(&python).args(CUDA_PACKAGES).args(LAUNCHER_PACKAGES).args(MODEL_PACKAGES)).context(pip_fix)?;
    for version in NCCL_VERSIONS {
        run_checked(
            pip(&python)
                .arg("--no-deps")
                .arg("--target")
                .arg(dir.join(format!("nccl-{version}")))
                .arg(format!("{NCCL_PACKAGE}=={version}")),
        )
        .context(pip_fix)?;
    }

    let toolchain =
        Toolchain::locate(dir).context("pip succeeded but the toolchain does not have the expected layout")?;
    smoke_compile(&toolchain)?;

    let resolved = resolved_packages(&python, &toolchain);
    write_atomically(&dir.join(STAMP_FILE), &stamp_text(spec, &resolved))?;
    say(&format!("provisioned in {:.0} s", started.elapsed().as_secs_f64()));
    Ok(())
}

fn pip(python: &Path) -> Command {
    let mut command = Command::new(python);
    command.args(["-m", "pip", "install", "--progress-bar", "off"]).env("PIP_DISABLE_PIP_VERSION_CHECK", "1");
    command
}

/// Compiles a kernel that includes NCCL's device API against each NCCL, so a toolchain that
/// installs but cannot compile (wrong nvvm, missing crt headers, unusable gcc) fails here,
/// once, with a clear cause — not later inside every codegen test.
fn smoke_compile(toolchain: &Toolchain) -> Result<()> {
    let work = toolchain.dir.join("smoke");
    fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    let source = work.join("smoke.cu");
    fs::write(
        &source,
        "#include <nccl.h>\n#include <nccl_device.h>\n\
         __global__ void weft_smoke(float* out) { out[threadIdx.x] = 1.0f; }\n",
    )
    .with_context(|| format!("cannot write {}", source.display()))?;
    for install in &toolchain.nccl {
        let started = Instant::now();
        let cubin = work.join(format!("smoke-{}.cubin", install.version));
        run_checked(
            Command::new(&toolchain.nvcc)
                .args(["-cubin", "-arch=sm_90", "-std=c++17"])
                .arg("-I")
                .arg(&install.include_dir)
                .arg("-I")
                .arg(toolchain.cuda_home.join("include").join("cccl"))
                .arg("-o")
                .arg(&cubin)
                .arg(&source),
        )
        .with_context(|| {
            format!(
                "nvcc cannot compile a kernel against NCCL {} headers; \
                 check that gcc is on PATH and the CUDA wheels are all 13.0",
                install.version
            )
        })?;
        say(&format!(
            "smoke test: sm_90 cubin against NCCL {} in {:.1} s",
            install.version,
            started.elapsed().as_secs_f64()
        ));
    }
    fs::remove_dir_all(&work).with_context(|| format!("cannot remove {}", work.display()))
}

/// What pip actually installed, recorded in the stamp for humans; failing to get it is not
/// worth failing the install for.
fn resolved_packages(python: &Path, toolchain: &Toolchain) -> String {
    let mut resolved = match Command::new(python).args(["-m", "pip", "freeze"]).output() {
        Ok(output) if output.status.success() => String::from_utf8_lossy(&output.stdout).into(),
        _ => String::from("(pip freeze failed)\n"),
    };
    if let Ok(version) = nvcc_version(&toolchain.nvcc) {
        resolved.push_str(&format!("nvcc: {version}\n"));
    }
    for install in &toolchain.nccl {
        resolved.push_str(&format!(
            "{NCCL_PACKAGE}=={} (nccl.h NCCL_VERSION_CODE {})\n",
            install.version, install.version.code
        ));
    }
    resolved
}

/// Write-then-rename, so the stamp either holds the whole spec or does not exist: it is the
/// one file that certifies everything else, and a crash mid-write must leave "not provisioned".
fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    let temporary = PathBuf::from(format!("{}.tmp", path.display()));
    let mut file = File::create(&temporary).with_context(|| format!("cannot create {}", temporary.display()))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", temporary.display()))?;
    fs::rename(&temporary, path).with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_sits_beside_the_toolchain() {
        assert_eq!(lock_path(Path::new("/ws/target/weft-toolchain")), Path::new("/ws/target/weft-toolchain.lock"));
        assert_eq!(lock_path(Path::new("/opt/tc")), Path::new("/opt/tc.lock"));
    }

    #[test]
    fn only_a_toolchain_directory_is_deleted_to_start_over() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("tc");
        check_replaceable(&dir).expect("absent");
        for entry in ["venv", "nccl-2.28.9", "smoke"] {
            fs::create_dir_all(dir.join(entry)).unwrap();
        }
        fs::write(dir.join("stamp.tmp"), "").unwrap();
        check_replaceable(&dir).expect("a half-made toolchain");
        fs::write(dir.join("thesis.tex"), "").unwrap();
        let error = check_replaceable(&dir).unwrap_err().to_string();
        assert!(error.contains("thesis.tex") && error.contains("WEFT_TOOLCHAIN_DIR"), "{error}");
    }
}
