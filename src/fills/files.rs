//! Files the reliable lane creates hold fills (accounts, quantities,
//! prices): they are created with explicit modes, not whatever the umask
//! allows. Outside systemd (no `UMask=`) a 0022 umask would otherwise
//! leave them world-readable.
//!
//! - the SQLite database: 0600 (SQLite gives its `-wal` and `-shm` files
//!   the database file's mode, so they are 0600 too);
//! - directories created for them: 0750;
//! - dead-letter records (`fills push`): 0640.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const DB_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o750;
pub const RECORD_MODE: u32 = 0o640;

/// Creates `dir` and its missing parents with [`DIR_MODE`] (a directory
/// that exists is left as it is).
pub fn create_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    // The umask may have taken bits away from the mode, never added: set
    // it exactly.
    std::fs::set_permissions(dir, Permissions::from_mode(DIR_MODE))
}

/// Creates (truncating) `path` with `mode` exactly, whatever the umask.
pub fn create_file(path: &Path, mode: u32) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.set_permissions(Permissions::from_mode(mode))?;
    Ok(f)
}

/// Makes sure the SQLite database file exists with [`DB_MODE`] before
/// SQLite opens it, so that SQLite creates it (and its WAL and SHM files,
/// which take the database's mode) no wider. An existing database that
/// others may read is narrowed to the owner and its group, with a warning.
pub fn prepare_db_file(path: &Path) -> io::Result<()> {
    match std::fs::metadata(path) {
        Ok(m) => {
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o007 != 0 {
                let narrowed = mode & 0o770;
                tracing::warn!(
                    path = %path.display(),
                    mode = format!("{mode:04o}"),
                    now = format!("{narrowed:04o}"),
                    "the fills database was readable by others; narrowed"
                );
                std::fs::set_permissions(path, Permissions::from_mode(narrowed))?;
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(DB_MODE)
                .open(path)?;
            f.set_permissions(Permissions::from_mode(DB_MODE))
        }
        Err(e) => Err(e),
    }
}
