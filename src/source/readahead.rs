//! Asks the kernel to read an input file ahead of the parser.
//!
//! The kernel's own read-ahead starts only where a read finds a page missing, and the
//! read waits for that page. When only some of a file's pages are cached (the rest
//! evicted, or never read), the parser stops at every gap while the core beside it,
//! the sink's, runs out of rows and idles too: a 2-core load of 1 GB whose inputs were
//! 90-95% cached spent 65 sleeps and 99 ms in `filemap_read` on the source thread alone
//! (`perf sched`). A `POSIX_FADV_WILLNEED` hint over the bytes ahead starts reading the
//! missing pages in the background and skips the cached ones, so the gaps are filled
//! before the parser gets there.

use std::fs::File;
use std::io::{self, Read};

/// How far ahead of the parser the file is asked for: about 60 ms of parsing at the
/// source thread's 500 MB/s, long enough for a device to serve the reads.
const AHEAD: u64 = 32 << 20;

/// How far the parser reads between two hints. Each hint covers only bytes not asked
/// for before, so the kernel looks each page up once.
const STEP: u64 = 4 << 20;

/// A file read in order from `pos`, with the bytes before `hinted` already asked for.
pub(crate) struct Prefetched {
    file: File,
    pos: u64,
    hinted: u64,
}

impl Prefetched {
    /// Reads `file` from byte `from`, where it is positioned.
    pub(crate) fn new(file: File, from: u64) -> Prefetched {
        Prefetched {
            file,
            pos: from,
            hinted: from,
        }
    }

    /// Asks for the bytes up to `AHEAD` past the position once the position has come
    /// within `AHEAD - STEP` of the end of what was asked for before.
    fn hint(&mut self) {
        if let Some((offset, len)) = self.next_hint() {
            will_need(&self.file, offset, len);
        }
    }

    /// The offset and length of the bytes [`hint`](Prefetched::hint) asks for now, if
    /// any, marked as asked for.
    fn next_hint(&mut self) -> Option<(u64, u64)> {
        let end = self.pos.saturating_add(AHEAD);
        if end < self.hinted.saturating_add(STEP) {
            return None;
        }
        let start = std::mem::replace(&mut self.hinted, end);
        Some((start, end - start))
    }
}

impl Read for Prefetched {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.hint();
        let n = self.file.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Starts reading `len` bytes of `file` from `offset` into the page cache, without
/// waiting (Linux only; elsewhere nothing). A hint, so an error is ignored: the read
/// that follows reports any error the file has.
fn will_need(file: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let (Ok(offset), Ok(len)) = (
            libc::off64_t::try_from(offset),
            libc::off64_t::try_from(len),
        ) else {
            return;
        };
        // SAFETY: the descriptor is `file`'s, open for the call's duration; the call
        // reads no memory of ours.
        unsafe {
            libc::posix_fadvise64(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_file_from_its_position_whole_and_in_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.csv");
        let bytes: Vec<u8> = (0..(9u32 << 20)).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).expect("write");
        let from = 12_345;
        let mut file = File::open(&path).expect("open");
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(from)).expect("seek");
        let mut read = Vec::new();
        let mut prefetched = Prefetched::new(file, from);
        let mut buf = vec![0; 300_000];
        loop {
            let n = prefetched.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            read.extend_from_slice(&buf[..n]);
            assert!(read.len() <= bytes.len(), "read past the end");
            assert!(prefetched.hinted >= prefetched.pos);
        }
        assert_eq!(read, bytes[from as usize..]);
        assert_eq!(prefetched.pos, bytes.len() as u64);
    }

    #[test]
    fn each_hint_asks_only_for_bytes_not_asked_for_before() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("in.csv");
        std::fs::write(&path, b"a\n").expect("write");
        let mut prefetched = Prefetched::new(File::open(&path).expect("open"), 0);
        assert_eq!(prefetched.next_hint(), Some((0, AHEAD)));
        assert_eq!(prefetched.hinted, AHEAD);
        // Within a step of the last hint: nothing new is asked for.
        prefetched.pos = STEP - 1;
        assert_eq!(prefetched.next_hint(), None);
        assert_eq!(prefetched.hinted, AHEAD);
        prefetched.pos = STEP;
        assert_eq!(prefetched.next_hint(), Some((AHEAD, STEP)));
        assert_eq!(prefetched.hinted, STEP + AHEAD);
    }
}
