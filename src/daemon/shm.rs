//! Publishing the feeds' tables in the shared state file (`[gate] shm`,
//! docs/shm.md): the file is created under a temporary name, sized, given
//! its mode, its header written, and renamed into place; a file it
//! replaces is marked retired so that clients move on at once. The feed
//! tables then live in the mapping itself: the feed threads write there,
//! the gate socket reads there, clients map the same pages read-only.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};

use crate::client::map::Mapping;
use crate::feed::across::GateRules;
use crate::feed::shm::{
    self, FeedSpec, MAGIC, STATE_LIVE, STATE_RETIRED, STATE_STOPPED, W_MAGIC, W_PID, W_STATE,
};
use crate::feed::table::{WordStore, Words};

/// File mode of the state file: the owner writes, the socket's group
/// reads.
pub const DEFAULT_MODE: u32 = 0o640;

/// Where one feed's table lies in the mapping.
#[derive(Debug, Clone)]
pub struct FeedRegion {
    pub capacity: u32,
    pub cell: Words,
    pub table: Words,
    /// Unit cells (0: none) and their region (`reader::UnitLayout`).
    pub units: usize,
    pub units_region: Words,
}

/// The published file. Marks it stopped when dropped (the file stays, so
/// that clients see quotes age; the next start replaces it).
#[derive(Debug)]
pub struct Published {
    path: PathBuf,
    mapping: Arc<Mapping>,
    generation: u64,
}

impl Published {
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The file says the daemon stopped.
    pub fn stop(&self) {
        shm::set_state(self.mapping.words(), STATE_STOPPED);
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A generation that differs on every start: the wall clock in ns mixed
/// with the pid (never 0).
fn new_generation(now_ns: i64) -> u64 {
    let g = (now_ns as u64) ^ ((std::process::id() as u64) << 48);
    g.max(1)
}

/// Is `pid` a running process (or one we may not signal)?
fn alive(pid: u64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Allocates every block of the first `bytes` of `file` now. A file only
/// sized (`ftruncate`) gets its pages on first write, through the mapping:
/// on a full tmpfs that write is a `SIGBUS`, not an error. Fails with
/// `ENOSPC` (or `EFBIG`) instead.
pub fn preallocate(file: &File, bytes: usize) -> io::Result<()> {
    let len =
        libc::off_t::try_from(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    // SAFETY: a descriptor we own; posix_fallocate reads no memory of ours.
    // It returns the error number instead of setting errno.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => Ok(()),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// The file now at `path`, if it is a state file: opened for writing its
/// `state` word. Refuses when a running daemon still publishes it.
fn previous(path: &Path) -> anyhow::Result<Option<File>> {
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        // Not blocking on a FIFO someone left at the path.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("opening the old state file {}", path.display()))
        }
    };
    if !file.metadata()?.is_file() {
        bail!(
            "{} exists and is not a regular file; refusing to replace it",
            path.display()
        );
    }
    let word = |i: usize| -> io::Result<u64> {
        let mut b = [0u8; 8];
        file.read_exact_at(&mut b, (i * 8) as u64)?;
        Ok(u64::from_le_bytes(b))
    };
    match word(W_MAGIC) {
        Ok(MAGIC) => {}
        _ => bail!(
            "{} exists and is not a tickgate state file; refusing to replace it",
            path.display()
        ),
    }
    let state = word(W_STATE)?;
    let pid = word(W_PID)?;
    if state == STATE_LIVE && pid != std::process::id() as u64 && alive(pid) {
        bail!(
            "{} is published by a running tickgate (pid {pid}); is tickgate already running? (if pid {pid} is not tickgate, remove the file)",
            path.display()
        );
    }
    Ok(Some(file))
}

/// Creates and publishes the state file for these feeds, with the default
/// `[gate]` rules.
pub fn publish(
    path: &Path,
    mode: u32,
    specs: &[FeedSpec],
) -> anyhow::Result<(Published, Vec<FeedRegion>)> {
    publish_with_rules(path, mode, specs, &GateRules::default())
}

/// Creates and publishes the state file for these feeds and the `[gate]`
/// rules the clients answer with (gate.md "One symbol on several feeds").
pub fn publish_with_rules(
    path: &Path,
    mode: u32,
    specs: &[FeedSpec],
    rules: &GateRules,
) -> anyhow::Result<(Published, Vec<FeedRegion>)> {
    if specs.len() > shm::MAX_FEEDS {
        bail!(
            "{} feeds; the state file holds at most {}",
            specs.len(),
            shm::MAX_FEEDS
        );
    }
    for s in specs {
        if shm::name_words(&s.name).is_none() {
            bail!(
                "feed name {:?} does not fit the state file (1 to {} bytes, no NUL)",
                s.name,
                shm::NAME_BYTES - 1
            );
        }
    }
    let old = previous(path)?;
    let tmp = crate::gate::server::temp_beside(path, "state file")?;
    let caps: Vec<(u32, u32)> = specs.iter().map(|s| (s.capacity, s.units)).collect();
    let plan = shm::plan_units(&caps);
    let made = (|| -> anyhow::Result<(Mapping, u64)> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)
            .with_context(|| format!("creating {}", tmp.display()))?;
        // The umask may have narrowed the mode: set it exactly.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("setting mode {mode:o} on {}", tmp.display()))?;
        preallocate(&file, plan.words * 8).with_context(|| {
            format!(
                "reserving {} bytes for the state file {} (its file system must hold all of it: a page it cannot allocate later would kill the daemon with SIGBUS)",
                plan.words * 8,
                tmp.display()
            )
        })?;
        let mapping = Mapping::create(&file, plan.words * 8).with_context(|| {
            format!(
                "sizing and mapping {} ({} bytes)",
                tmp.display(),
                plan.words * 8
            )
        })?;
        let now = crate::client::realtime_ns();
        let generation = new_generation(now);
        shm::write_header(
            mapping.words(),
            specs,
            generation,
            std::process::id() as u64,
            now,
            rules,
        );
        std::fs::rename(&tmp, path)
            .with_context(|| format!("moving the state file into place at {}", path.display()))?;
        Ok((mapping, generation))
    })();
    let (mapping, generation) = match made {
        Ok(m) => m,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Some(old) = old {
        // Clients of the old file remap on their next check.
        if let Err(e) = old.write_all_at(&STATE_RETIRED.to_le_bytes(), (W_STATE * 8) as u64) {
            tracing::warn!(path = %path.display(), error = %e, "could not mark the replaced state file retired");
        }
    }
    let mapping = Arc::new(mapping);
    let all = Words::shared(mapping.clone());
    let regions = plan
        .feeds
        .iter()
        .map(|p| FeedRegion {
            capacity: p.table.capacity,
            cell: all
                .range(p.cell_at, p.table_at - p.cell_at)
                .expect("planned inside the file"),
            table: all
                .range(p.table_at, p.table.words)
                .expect("planned inside the file"),
            units: p.units.units,
            units_region: all
                .range(p.units_at, p.units.words)
                .expect("planned inside the file"),
        })
        .collect();
    tracing::info!(path = %path.display(), generation, bytes = plan.words * 8, "state file published");
    Ok((
        Published {
            path: path.to_path_buf(),
            mapping,
            generation,
        },
        regions,
    ))
}
