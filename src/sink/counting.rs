//! The file under a staged file's encoder: counts the bytes that reach it and starts
//! their writeback as they come.

use std::fs::File;
use std::io::Write;

use crate::core::sys::fsutil;

/// Bytes a staged file gains between two starts of its writeback
/// ([`fsutil::start_writeback`]). What a checkpoint's files gained since their last
/// start is what its fsyncs must still write and wait for, which the last checkpoint
/// does while the load waits: from the sink's end to exit, 1 GB in 40 partitions
/// (`perf sched timehist`, median of 8 alternated runs) took 40 ms at 1 MiB, 26 ms at
/// 512 KiB and 23 ms at 256 KiB. The smaller step costs no CPU time that shows (6
/// alternated rounds pinned to one core: 2.63 s of CPU against 2.64 s at 1 MiB);
/// 256 KiB doubles the calls again for 3 ms.
const WRITE_BEHIND: u64 = 1 << 19;

/// The page size writeback starts are rounded down to, so that the page still being
/// appended to is not under write-out (and CSV writes end on, `encode.rs`).
pub(crate) const PAGE: usize = 4096;

/// The file under the encoder, counting the bytes that reach it (for
/// `--target-file-size`, which therefore counts compressed bytes), and writing them
/// behind as they come.
pub(crate) struct CountingFile {
    file: File,
    written: u64,
    /// Where the file ended when opened (a reopened file is appended to).
    base: u64,
    /// Where the last writeback start ended, from `base`.
    behind: u64,
}

impl CountingFile {
    /// Counts what is written to `file`.
    pub(crate) fn new(file: File) -> CountingFile {
        // Only where writeback starts depends on it: 0 if unknown.
        let base = file.metadata().map_or(0, |m| m.len());
        CountingFile {
            file,
            written: 0,
            base,
            behind: 0,
        }
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Where the next write lands in the file.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.written
    }

    /// The file.
    pub(crate) fn into_file(self) -> File {
        self.file
    }
}

impl Write for CountingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.written += n as u64;
        if self.written - self.behind >= WRITE_BEHIND {
            let end = (self.base + self.written) / PAGE as u64 * PAGE as u64;
            fsutil::start_writeback(&self.file, end);
            self.behind = self.written;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counted_file_is_written_behind_from_where_it_ended_when_opened() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.csv");
        File::create(&path).unwrap();
        let chunk: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut want = Vec::new();
        for opening in 0..2 {
            let mut out = CountingFile::new(fsutil::open_append(&path).unwrap());
            assert_eq!(out.base, want.len() as u64, "opening {opening}");
            for _ in 0..25 {
                out.write_all(&chunk).unwrap();
                want.extend_from_slice(&chunk);
            }
            assert_eq!(out.written(), 2_500_000);
            // Started once 512 KiB had come (at 600,000 bytes), then each time another
            // had: at 1,200,000, 1,800,000 and 2,400,000.
            assert_eq!(out.behind, 2_400_000, "opening {opening}");
            drop(out.into_file());
        }
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }
}
