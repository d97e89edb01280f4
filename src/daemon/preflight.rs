//! The config checked against this host: what `run` needs the host to
//! have before anything starts (interfaces that exist, directories it can
//! create). `run --check-config` and `run` both call [`check`] after
//! [`Config::load`], so the check refuses everything the start would refuse
//! as a config problem, with the same message and exit code 2.
//!
//! Nothing is created here: a check has no side effects.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::config::{Config, ConfigError};
use crate::fills::config::DbTarget;

use super::feeds;

/// Every host problem of `config`, in file order (feeds, gate, fills).
pub fn check(config: &Config) -> Result<(), ConfigError> {
    let mut out: Vec<ConfigError> = Vec::new();
    for (i, f) in config.feeds.iter().enumerate() {
        if let Err(e) = feeds::line_specs(i, f) {
            out.extend(e.problems().into_iter().cloned());
        }
    }
    if let Some(dir) = parent(&config.gate.socket) {
        if let Err(p) = can_create_in(dir) {
            out.push(invalid("gate.socket", p));
        }
    }
    if let Some(shm) = &config.gate.shm {
        // Beside the socket (the default), its directory is checked once.
        let dir_checked = parent(shm) == parent(&config.gate.socket);
        if let Err(p) = state_file_place(shm, dir_checked) {
            out.push(invalid("gate.shm", p));
        }
    }
    if let Some(fills) = &config.fills {
        if let Ok(DbTarget::Sqlite(path)) = fills.db_target() {
            if let Some(dir) = parent(&path) {
                if let Err(p) = can_create_in(dir) {
                    out.push(invalid("fills.db", p));
                } else if let Err(p) = sqlite_files_writable(&path) {
                    out.push(invalid("fills.db", p));
                }
            }
        }
    }
    ConfigError::from_all(out)
}

fn invalid(key: &str, problem: String) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        problem,
    }
}

fn parent(path: &Path) -> Option<&Path> {
    Some(
        path.parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new(".")),
    )
}

/// Whether the state file can be published at `path`: its directory can
/// be created or written, and nothing but a regular file (an old state
/// file, which the start then checks) is there.
fn state_file_place(path: &Path, dir_checked: bool) -> Result<(), String> {
    match parent(path) {
        Some(dir) if !dir_checked => can_create_in(dir)?,
        _ => {}
    }
    use std::os::unix::fs::FileTypeExt;
    let kind = match std::fs::symlink_metadata(path) {
        Ok(m) => m.file_type(),
        Err(_) => return Ok(()),
    };
    let what = if kind.is_file() {
        // An old state file is replaced in place of its `state` word
        // first (the start opens it for writing): one a run as another
        // user (root) left must be this user's to write.
        return writable(path, parent(path).unwrap_or(Path::new(".")));
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    };
    Err(format!(
        "{} is {what}; the state file must be a regular file the daemon creates",
        path.display()
    ))
}

/// Whether this process could create `dir` (and its missing parents) and
/// files in it: the nearest existing ancestor must be a directory this
/// user may write.
fn can_create_in(dir: &Path) -> Result<(), String> {
    let mut existing = dir;
    loop {
        match std::fs::metadata(existing) {
            Ok(m) if m.is_dir() => break,
            Ok(_) => {
                return Err(format!(
                    "cannot create {}: {} is not a directory",
                    dir.display(),
                    existing.display()
                ))
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                match existing.parent() {
                    Some(p) if !p.as_os_str().is_empty() => existing = p,
                    _ => {
                        existing = Path::new(".");
                        break;
                    }
                }
            }
            Err(e) => return Err(format!("cannot use {}: {e}", existing.display())),
        }
    }
    let c = CString::new(existing.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", dir.display()))?;
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if existing == dir {
            format!(
                "cannot create files in {}: {e}{}",
                dir.display(),
                not_ours(dir)
            )
        } else {
            format!(
                "cannot create {}: {} is not writable: {e}",
                dir.display(),
                existing.display()
            )
        });
    }
    Ok(())
}

/// `path` (which exists) can be read and written by this user; if not,
/// the error says who owns it and the `chown` of `dir` that fixes it.
fn writable(path: &Path, dir: &Path) -> Result<(), String> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| format!("{} contains a NUL byte", path.display()))?;
    // SAFETY: `c` is a valid NUL-terminated path; access only reads it.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(format!(
            "cannot write {}: {e}{}",
            path.display(),
            not_ours_cmd(path, dir)
        ));
    }
    Ok(())
}

/// An SQLite database that exists must be one this user can write, with
/// its journal files (`-wal`, `-shm`): a run as another user (root) leaves
/// them behind owned by that user.
fn sqlite_files_writable(db: &Path) -> Result<(), String> {
    let mut names = vec![db.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        names.push(p.into());
    }
    let dir = parent(db).unwrap_or(Path::new("."));
    for path in names.iter().filter(|p| p.exists()) {
        writable(path, dir)?;
    }
    Ok(())
}

/// For a directory this user may not write: when another user owns it
/// (an earlier run as root), who, and the command that gives it to this
/// user. Empty otherwise (the mode is the operator's choice).
fn not_ours(dir: &Path) -> String {
    not_ours_cmd(dir, dir)
}

/// `path` belongs to another user: the `chown` of `dir` (the state
/// directory, everything in it) that fixes it.
fn not_ours_cmd(path: &Path, dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = std::fs::metadata(path) else {
        return String::new();
    };
    // SAFETY: geteuid and getegid cannot fail.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if m.uid() == uid {
        return String::new();
    }
    let me = user_name(uid).unwrap_or_else(|| uid.to_string());
    let group = group_name(gid).unwrap_or_else(|| gid.to_string());
    let owner = user_name(m.uid()).unwrap_or_else(|| m.uid().to_string());
    format!(
        "; it belongs to {owner}, not {me} (left by a run as {owner}?): as root, run `chown -R {me}:{group} {}`",
        dir.display()
    )
}

fn user_name(uid: libc::uid_t) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: zeroed passwd is a valid out-parameter for getpwuid_r.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; buf outlives the use
    // of pw's strings below.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: pw_name points into buf, NUL-terminated, on success.
    let name = unsafe { std::ffi::CStr::from_ptr(pw.pw_name) };
    Some(name.to_string_lossy().into_owned())
}

fn group_name(gid: libc::gid_t) -> Option<String> {
    let mut buf = vec![0 as libc::c_char; 4096];
    // SAFETY: zeroed group is a valid out-parameter for getgrgid_r.
    let mut gr: libc::group = unsafe { std::mem::zeroed() };
    let mut out = std::ptr::null_mut();
    // SAFETY: as in `user_name`.
    let rc = unsafe { libc::getgrgid_r(gid, &mut gr, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() {
        return None;
    }
    // SAFETY: gr_name points into buf, NUL-terminated, on success.
    let name = unsafe { std::ffi::CStr::from_ptr(gr.gr_name) };
    Some(name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a file of another user (a run as root's, for the service
    /// user) is told: who owns it and the `chown` of the directory.
    #[test]
    fn another_users_file_gets_the_chown_to_run() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("fills.db");
        std::fs::write(&db, b"").unwrap();
        assert_eq!(not_ours_cmd(&db, dir.path()), "", "our own file");
        // SAFETY: geteuid cannot fail.
        let uid = unsafe { libc::geteuid() };
        let me = user_name(uid).unwrap_or_else(|| uid.to_string());
        let other = if uid == 0 { 65534 } else { 0 };
        let c = CString::new(db.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid path; only root may give a file away.
        if unsafe { libc::chown(c.as_ptr(), other, u32::MAX) } != 0 {
            return; // not root: a file of another user cannot be made here
        }
        let owner = user_name(other).unwrap_or_else(|| other.to_string());
        let hint = not_ours_cmd(&db, dir.path());
        // SAFETY: getegid cannot fail.
        let gid = unsafe { libc::getegid() };
        let group = group_name(gid).unwrap_or_else(|| gid.to_string());
        let want = format!(
            "; it belongs to {owner}, not {me} (left by a run as {owner}?): as root, run `chown -R {me}:{group} {}`",
            dir.path().display()
        );
        assert_eq!(hint, want);
    }

    #[test]
    fn a_directory_under_a_file_cannot_be_created() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        let e = can_create_in(&file.join("sub/deeper")).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
        can_create_in(&dir.path().join("new/dir")).unwrap();
        can_create_in(dir.path()).unwrap();
    }
}
