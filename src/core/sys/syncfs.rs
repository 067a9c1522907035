//! Durability in bulk: one `syncfs(2)` of the table's filesystem where a step would
//! otherwise fsync hundreds of files and directories one by one.
//!
//! A checkpoint of 4,000 partitions staged 4,000 files and renamed them into 4,000
//! directories: 8,000 fsyncs, 70% of the load's system-call time (`strace -f -c`),
//! however many ran at once. `syncfs` writes back every dirty inode of the filesystem
//! and commits its journal in one call, so it makes the same files and directory
//! entries durable (the strict model of docs/ARCHITECTURE.md counts it as an fsync of
//! everything before it).
//!
//! It is only as good as the errors it reports. Since Linux 5.8 `syncfs` returns a
//! writeback error recorded on the filesystem since the descriptor it is given was
//! opened (`errseq`), so a [`FsSync`] is opened before the writes it must cover, and
//! reports each error at least once. It is used on the local filesystems whose
//! `syncfs` writes back every dirty inode and metadata block and flushes the device
//! before it returns (ext4 with or without a journal, XFS, btrfs); elsewhere (NFS,
//! FUSE, overlays, older kernels, other systems) each file is fsynced as before.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Context, Result};

/// Files (or directories) from which one step makes them durable with one `syncfs`
/// instead of an fsync each; `INGEST_SYNCFS_FROM` overrides it (tests set 1 to put
/// small loads on this path, a large number turns it off). Below it the fsyncs are few
/// and `syncfs` would also wait for whatever else the filesystem holds dirty.
const SYNCFS_FROM: usize = 64;

/// The threshold: [`SYNCFS_FROM`] or `INGEST_SYNCFS_FROM`.
fn syncfs_from() -> usize {
    static FROM: OnceLock<usize> = OnceLock::new();
    *FROM.get_or_init(|| {
        std::env::var("INGEST_SYNCFS_FROM")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(SYNCFS_FROM)
    })
}

/// True when a step that makes `items` files or directories durable should use a
/// [`FsSync`] (if the filesystem allows one).
pub(crate) fn worth_it(items: usize) -> bool {
    items >= syncfs_from().max(1)
}

/// A directory held open to `syncfs` its filesystem, opened before the writes it covers.
#[derive(Debug)]
pub(crate) struct FsSync {
    handle: File,
    path: PathBuf,
}

impl FsSync {
    /// Opens `dir` for a later [`FsSync::sync`], or `None` when its filesystem is not one
    /// whose `syncfs` makes everything durable and reports writeback errors (the caller
    /// then fsyncs each file).
    pub(crate) fn open(dir: &Path) -> Result<Option<FsSync>> {
        let handle =
            File::open(dir).with_context(|| format!("cannot open directory {}", dir.display()))?;
        if !trusted(&handle) {
            return Ok(None);
        }
        Ok(Some(FsSync {
            handle,
            path: dir.to_path_buf(),
        }))
    }

    /// Makes everything written to the filesystem so far durable: file data, sizes and
    /// directory entries alike. An error (a writeback error since [`FsSync::open`]
    /// included) means nothing may be relied on.
    pub(crate) fn sync(&self) -> Result<()> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // SAFETY: the descriptor is `self.handle`'s, open for the call's duration; the
            // call reads no memory of ours.
            if unsafe { libc::syncfs(self.handle.as_raw_fd()) } != 0 {
                return Err(std::io::Error::last_os_error()).with_context(|| {
                    format!("cannot sync the filesystem of {}", self.path.display())
                });
            }
            Ok(())
        }
        #[cfg(not(target_os = "linux"))]
        anyhow::bail!(
            "cannot sync the filesystem of {}: syncfs is Linux only",
            self.path.display()
        )
    }
}

/// True for a descriptor on ext4, XFS or btrfs, under a kernel whose `syncfs` reports
/// writeback errors (5.8 and later).
fn trusted(handle: &File) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        const EXT4: i64 = 0xEF53;
        const XFS: i64 = 0x5846_5342;
        const BTRFS: i64 = 0x9123_683E;
        let mut stat = std::mem::MaybeUninit::<libc::statfs>::uninit();
        // SAFETY: `stat` is a valid place for one `statfs`, which the call fills when it
        // returns 0; the descriptor is open for the call's duration.
        if unsafe { libc::fstatfs(handle.as_raw_fd(), stat.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: filled by the successful call above. `f_type`'s type differs between
        // architectures (i64 here, u32 or i32 on others): the magic numbers fit all.
        #[allow(clippy::unnecessary_cast)]
        let kind = unsafe { stat.assume_init() }.f_type as i64;
        [EXT4, XFS, BTRFS].contains(&kind) && kernel_reports_errors()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = handle;
        false
    }
}

/// True when the running kernel is 5.8 or later (`uname`), where `syncfs` returns the
/// filesystem's writeback errors instead of only starting and waiting for writeback.
#[cfg(target_os = "linux")]
fn kernel_reports_errors() -> bool {
    static NEW_ENOUGH: OnceLock<bool> = OnceLock::new();
    *NEW_ENOUGH.get_or_init(|| {
        let mut name = std::mem::MaybeUninit::<libc::utsname>::uninit();
        // SAFETY: `name` is a valid place for one `utsname`, filled when the call returns 0.
        if unsafe { libc::uname(name.as_mut_ptr()) } != 0 {
            return false;
        }
        // SAFETY: filled by the successful call above; `release` is NUL-terminated.
        let name = unsafe { name.assume_init() };
        let release = unsafe { std::ffi::CStr::from_ptr(name.release.as_ptr()) };
        at_least_5_8(&release.to_string_lossy())
    })
}

/// True for a kernel release (`6.18.44-fc`, `5.8.0`) of version 5.8 or later.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn at_least_5_8(release: &str) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (5, 8),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_from_5_8_report_writeback_errors_through_syncfs() {
        assert!(at_least_5_8("5.8.0"));
        assert!(at_least_5_8("6.18.44-fc-v1147"));
        assert!(at_least_5_8("10.0"));
        assert!(!at_least_5_8("5.7.19"));
        assert!(!at_least_5_8("4.19.0-generic"));
        assert!(!at_least_5_8("garbage"));
    }

    #[test]
    fn a_sync_of_a_trusted_filesystem_succeeds_and_others_get_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let opened = FsSync::open(dir.path()).unwrap();
        assert_eq!(opened.is_some(), trusted(&File::open(dir.path()).unwrap()));
        if let Some(sync) = opened {
            sync.sync().unwrap();
        }
        assert!(FsSync::open(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_tmpfs_is_not_trusted_with_syncfs() {
        // tmpfs keeps nothing across a power cut; its `syncfs` makes nothing durable.
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm to try a tmpfs on");
            return;
        };
        assert!(FsSync::open(dir.path()).unwrap().is_none());
    }
}
