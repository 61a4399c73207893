//! The cache directory belongs to its user alone.
//!
//! A cubin read from the cache is loaded into the GPU and run: whoever can write the directory can make this
//! process run their code, and the entry checksums do not help (a planted entry carries its own). So the
//! directory is created mode 0700, and before the cache is used the directory, and each directory between it and
//! the root of what weft created (`<user cache dir>/weft` for the default location), must be owned by this user
//! and not writable by group or others. Directories weft did not create (`~/.cache`, `/tmp`) are the user's
//! choice and are not judged. A symbolic link on the way must itself belong to this user (or root), since its
//! owner can re-point it.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::jit::JitError;

/// Group- and other-write permission bits.
const WRITABLE_BY_OTHERS: u32 = 0o022;

/// Creates `dir` and its missing ancestors (each mode 0700), then checks it as [`check`] does, counting the
/// directories just created among weft's.
pub(super) fn ensure(dir: &Path, owned_root: &Path) -> Result<(), JitError> {
    let mut missing = Vec::new();
    let mut next = Some(dir);
    while let Some(path) = next {
        match fs::symlink_metadata(path) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(path.to_path_buf()),
            Err(e) => return Err(cache_io("inspect", path, e)),
        }
        next = path.parent().filter(|p| !p.as_os_str().is_empty());
    }
    for path in missing.iter().rev() {
        match fs::DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            // Created meanwhile by someone else: it is checked below like the ones weft made.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(cache_io("create directory", path, e)),
        }
    }
    check_all(dir, owned_root, &missing).map(|_| ())
}

/// Checks `dir` and its weft-made ancestors without creating anything: `Ok(false)` when `dir` does not exist yet.
pub(super) fn check(dir: &Path, owned_root: &Path) -> Result<bool, JitError> {
    check_all(dir, owned_root, &[])
}

/// Creates the directory `dir` inside the (already checked) cache directory, with mode 0700 for anything new.
pub(super) fn create_inside(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

fn check_all(dir: &Path, owned_root: &Path, created: &[PathBuf]) -> Result<bool, JitError> {
    let me = current_uid().map_err(|problem| JitError::CacheDirInsecure { dir: dir.to_path_buf(), problem })?;
    let mut judged: Vec<&Path> = vec![dir];
    if dir.starts_with(owned_root) {
        judged.extend(dir.ancestors().skip(1).take_while(|a| a.starts_with(owned_root)));
    }
    judged.extend(created.iter().map(PathBuf::as_path));
    let mut exists = true;
    for path in judged {
        let link = match fs::symlink_metadata(path) {
            Ok(link) => link,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                exists &= path != dir;
                continue;
            }
            Err(e) => return Err(cache_io("inspect", path, e)),
        };
        if link.file_type().is_symlink() && link.uid() != me && link.uid() != 0 {
            let problem = format!("is a symbolic link owned by uid {}, not by this user (uid {me})", link.uid());
            return Err(JitError::CacheDirInsecure { dir: path.to_path_buf(), problem });
        }
        let target = fs::metadata(path).map_err(|e| cache_io("inspect", path, e))?;
        if !target.is_dir() {
            let problem = "is not a directory".to_string();
            return Err(JitError::CacheDirInsecure { dir: path.to_path_buf(), problem });
        }
        if let Some(problem) = judge(target.uid(), target.mode(), me) {
            return Err(JitError::CacheDirInsecure { dir: path.to_path_buf(), problem });
        }
    }
    Ok(exists)
}

/// Why a directory with this owner and mode must not hold this user's kernels, if it must not.
fn judge(owner: u32, mode: u32, me: u32) -> Option<String> {
    if owner != me {
        return Some(format!("is owned by uid {owner}, not by this user (uid {me})"));
    }
    if mode & WRITABLE_BY_OTHERS != 0 {
        return Some(format!("is writable by group or others (mode {:03o})", mode & 0o777));
    }
    None
}

/// The effective user id of this process, from `/proc/self/status` (weft runs on Linux only; no libc call
/// needed).
fn current_uid() -> Result<u32, String> {
    let status = fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("cannot be checked: this process's user id is unreadable (/proc/self/status: {e})"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| "cannot be checked: /proc/self/status has no readable Uid line".to_string())
}

fn cache_io(action: &'static str, path: &Path, source: io::Error) -> JitError {
    JitError::CacheIo { action, path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn chmod(path: &Path, mode: u32) {
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }
    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o777
    }

    #[test]
    fn the_user_id_is_the_owner_of_what_this_process_creates() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(current_uid().unwrap(), fs::metadata(dir.path()).unwrap().uid());
    }

    #[test]
    fn another_users_directory_or_a_shared_writable_one_is_refused() {
        assert_eq!(judge(1000, 0o40700, 1000), None);
        assert_eq!(judge(1000, 0o40755, 1000), None, "readable by others is not a risk to this user");
        assert!(judge(1000, 0o40770, 1000).unwrap().contains("writable by group or others (mode 770)"));
        assert!(judge(1000, 0o40702, 1000).unwrap().contains("mode 702"));
        assert!(judge(0, 0o40700, 1000).unwrap().contains("owned by uid 0, not by this user (uid 1000)"));
        assert!(judge(1001, 0o40700, 1000).unwrap().contains("uid 1001"));
    }

    #[test]
    fn missing_directories_are_created_private_and_then_pass() {
        let root = tempfile::tempdir().unwrap();
        chmod(root.path(), 0o755);
        let dir = root.path().join("new/deeper/kernels");
        assert!(!check(&dir, &dir).unwrap(), "not there yet");
        assert!(!root.path().join("new").exists(), "checking creates nothing");
        ensure(&dir, &dir).unwrap();
        for created in ["new", "new/deeper", "new/deeper/kernels"] {
            assert_eq!(mode(&root.path().join(created)), 0o700, "{created}");
        }
        assert!(check(&dir, &dir).unwrap());
        ensure(&dir, &dir).unwrap();
    }

    #[test]
    fn a_writable_cache_directory_is_refused_with_the_fix() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("kernels");
        fs::create_dir(&dir).unwrap();
        for bad in [0o777, 0o775, 0o722] {
            chmod(&dir, bad);
            let err = ensure(&dir, &dir).unwrap_err();
            let text = err.to_string();
            assert!(matches!(err, JitError::CacheDirInsecure { .. }), "{text}");
            assert!(
                text.contains(&format!("chmod 700 {}", dir.display())) && text.contains("WEFT_CACHE_DIR"),
                "{text}"
            );
            assert!(text.contains(&format!("mode {bad:03o}")), "{text}");
            assert_eq!(mode(&dir), bad, "weft never changes the permissions of an existing directory");
        }
        chmod(&dir, 0o755);
        ensure(&dir, &dir).unwrap();
    }

    /// With the default location, `<user cache>/weft` is weft's own: it is judged too. A writable directory
    /// above what weft created (like `/tmp`) is the user's choice and is not.
    #[test]
    fn weft_made_ancestors_are_judged_and_others_are_not() {
        let root = tempfile::tempdir().unwrap();
        let shared = root.path().join("shared");
        fs::create_dir(&shared).unwrap();
        chmod(&shared, 0o777);
        let weft = shared.join("weft");
        let dir = weft.join("kernels");
        ensure(&dir, &weft).unwrap();
        assert_eq!((mode(&weft), mode(&dir)), (0o700, 0o700));

        chmod(&weft, 0o777);
        let text = ensure(&dir, &weft).unwrap_err().to_string();
        assert!(text.contains(&format!("chmod 700 {}", weft.display())), "{text}");
        assert!(check(&dir, &weft).is_err(), "the read-only check agrees");
        // The same directory named directly (WEFT_CACHE_DIR) owns no ancestors.
        ensure(&dir, &dir).unwrap();
    }

    #[test]
    fn symbolic_links_are_followed_and_judged_by_their_target() {
        let root = tempfile::tempdir().unwrap();
        let target = root.path().join("target");
        fs::create_dir(&target).unwrap();
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        chmod(&target, 0o700);
        ensure(&link, &link).unwrap();
        chmod(&target, 0o777);
        assert!(ensure(&link, &link).unwrap_err().to_string().contains("writable by group or others"));

        let file = root.path().join("file");
        fs::write(&file, "").unwrap();
        assert!(ensure(&file, &file).unwrap_err().to_string().contains("is not a directory"));
    }
}
