//! Manifest segments of a table in a bucket, read from the bucket in pages, on demand.
//!
//! A machine's working copy starts with none of a job's segments. Downloading them all
//! would make its first command cost the job's whole history (about 120 bytes per input
//! ever loaded). Instead `pull` leaves a *reference* where each segment would be: a small
//! file naming the object, its ETag and its size. [`open`] turns a reference into a
//! [`ReadAt`] that fetches the 64 KiB pages a read touches with ranged GETs
//! (`If-Match` the ETag: segments are immutable, so a changed one is an error, never a
//! mix), keeping them in an unlinked temporary file, so memory stays a bit per page.
//!
//! What a run then costs: opening a segment reads its footer and its two Bloom filters
//! (`manifest/segment.rs`, 2.5 bytes per entry), and a lookup that the filters turn away
//! reads nothing more; one they let through is a binary search, a few pages. Once a
//! segment's fetched pages pass a quarter of its size (a run re-offered much of the
//! history, or a merge reading it through), the rest comes in a few large GETs: a
//! command never fetches much more than the whole segment once.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use serde::{Deserialize, Serialize};

use super::s3::{client, flat, runtime};
use super::ReadAt;
use crate::core::url::ObjectUrl;

/// The first bytes of a reference file.
const MAGIC: &[u8; 8] = b"INGESTR\x01";
const PAGE: u64 = 64 * 1024;
/// Largest single GET when the rest of a segment is fetched.
const BULK: u64 = 8 * 1024 * 1024;

/// What a reference names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Reference {
    bucket: String,
    key: String,
    etag: String,
    len: u64,
}

/// The bytes of a reference to the object `url` (of `len` bytes, ETag `etag`).
pub(crate) fn reference(url: &ObjectUrl, etag: &str, len: u64) -> Result<Vec<u8>> {
    let reference = Reference {
        bucket: url.bucket.clone(),
        key: url.key.clone(),
        etag: etag.to_string(),
        len,
    };
    let mut bytes = MAGIC.to_vec();
    bytes.extend(serde_json::to_vec(&reference)?);
    Ok(bytes)
}

/// True when `bytes` (a file's first bytes) begin a reference.
pub(crate) fn is_reference(bytes: &[u8]) -> bool {
    bytes.starts_with(MAGIC)
}

/// The object a reference file names, readable at any offset.
pub(crate) fn open(path: &Path, bytes: &[u8]) -> Result<Box<dyn ReadAt>> {
    let reference: Reference = bytes
        .strip_prefix(MAGIC)
        .and_then(|json| serde_json::from_slice(json).ok())
        .with_context(|| {
            format!(
                "{} is a damaged reference to a bucket object",
                path.display()
            )
        })?;
    Ok(Box::new(Paged::new(client(&reference.bucket)?, reference)?))
}

/// A bucket object's bytes, fetched in pages as reads need them.
struct Paged {
    store: Arc<AmazonS3>,
    reference: Reference,
    /// The fetched pages, at their offsets (an unlinked file: a crash leaves nothing).
    pages: File,
    state: Mutex<Fetched>,
}

#[derive(Debug)]
struct Fetched {
    have: Vec<bool>,
    bytes: u64,
}

impl std::fmt::Debug for Paged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Paged(s3://{}/{})",
            self.reference.bucket, self.reference.key
        )
    }
}

impl Paged {
    fn new(store: Arc<AmazonS3>, reference: Reference) -> Result<Paged> {
        let pages = unlinked_file()?;
        let count = reference.len.div_ceil(PAGE) as usize;
        Ok(Paged {
            store,
            reference,
            pages,
            state: Mutex::new(Fetched {
                have: vec![false; count],
                bytes: 0,
            }),
        })
    }

    fn url(&self) -> String {
        format!("s3://{}/{}", self.reference.bucket, self.reference.key)
    }

    /// Fetches pages `first..end` (all missing) in one ranged GET per at most [`BULK`]
    /// bytes and stores them.
    fn fetch(&self, first: usize, end: usize) -> Result<u64> {
        let start = first as u64 * PAGE;
        let stop = (end as u64 * PAGE).min(self.reference.len);
        let mut at = start;
        while at < stop {
            let to = (at + BULK).min(stop);
            let options = GetOptions {
                if_match: Some(self.reference.etag.clone()),
                range: Some(GetRange::Bounded(at..to)),
                ..GetOptions::default()
            };
            let location = ObjectPath::from(self.reference.key.as_str());
            let got = runtime()?.block_on(async {
                let got = self.store.get_opts(&location, options).await?;
                got.bytes().await
            });
            let bytes = match got {
                Ok(bytes) => bytes,
                Err(object_store::Error::Precondition { .. }) => bail!(
                    "manifest segment {} changed in the bucket (its ETag is no longer {}); \
                     segments are never rewritten, so the job's state is damaged",
                    self.url(),
                    self.reference.etag
                ),
                Err(e) => {
                    return Err(flat(e)).with_context(|| format!("cannot read {}", self.url()))
                }
            };
            if bytes.len() as u64 != to - at {
                bail!(
                    "{} returned {} bytes for bytes {at}..{to}: it is shorter than its \
                     listing said",
                    self.url(),
                    bytes.len()
                );
            }
            self.pages
                .write_all_at(&bytes, at)
                .context("cannot write the temporary copy of a manifest segment")?;
            at = to;
        }
        Ok(stop - start)
    }
}

/// Runs of consecutive pages in `first..end` not yet in `have`.
fn missing_runs(have: &[bool], first: usize, end: usize) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut at = first;
    for run in have[first..end].chunk_by(|a, b| a == b) {
        if !run[0] {
            runs.push((at, at + run.len()));
        }
        at += run.len();
    }
    runs
}

impl ReadAt for Paged {
    fn size(&self) -> Result<u64> {
        Ok(self.reference.len)
    }

    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> Result<()> {
        let end = at + buf.len() as u64;
        if end > self.reference.len {
            bail!(
                "read past the end of {} ({end} > {} bytes)",
                self.url(),
                self.reference.len
            );
        }
        if buf.is_empty() {
            return Ok(());
        }
        let mut state = self
            .state
            .lock()
            .map_err(|_| anyhow!("a manifest segment reader is poisoned"))?;
        let pages = state.have.len();
        let (mut first, mut last) = ((at / PAGE) as usize, end.div_ceil(PAGE) as usize);
        if state.bytes >= self.reference.len / 4 {
            // Read enough of it in pages: the rest comes in bulk, once.
            (first, last) = (0, pages);
        }
        for (start, stop) in missing_runs(&state.have, first, last) {
            state.bytes += self.fetch(start, stop)?;
            state.have[start..stop].fill(true);
        }
        self.pages
            .read_exact_at(buf, at)
            .context("cannot read the temporary copy of a manifest segment")
    }
}

/// A file of our own that no name leads to: created, then unlinked at once.
fn unlinked_file() -> Result<File> {
    let dir = std::env::temp_dir();
    for attempt in 0..16u32 {
        let path = dir.join(format!(
            ".ingest-pages-{}-{}-{attempt}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos())
        ));
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("cannot create a file in {}", dir.display()))
            }
        };
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        return Ok(file);
    }
    bail!("cannot create a temporary file in {}", dir.display())
}

#[cfg(test)]
mod tests {
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;

    /// A 1 MiB object in the test store, and a reader of it.
    fn object(test: &str) -> Option<(Arc<AmazonS3>, Vec<u8>, Reference)> {
        let Some((store, _, bucket)) = crate::storage::s3::test_clients() else {
            eprintln!("skipped paged::{test}: no S3 store (.ci/test starts one)");
            return None;
        };
        let bytes: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 31 % 251) as u8).collect();
        let key = format!("unit-paged-{test}-{}", std::process::id());
        let put = runtime()
            .unwrap()
            .block_on(store.put(
                &ObjectPath::from(key.as_str()),
                PutPayload::from(bytes.clone()),
            ))
            .unwrap();
        let reference = Reference {
            bucket,
            key,
            etag: put.e_tag.unwrap(),
            len: bytes.len() as u64,
        };
        Some((store, bytes, reference))
    }

    #[test]
    fn a_read_fetches_the_pages_it_touches_then_the_rest_once() {
        let Some((store, bytes, reference)) = object("pages") else {
            return;
        };
        let paged = Paged::new(store, reference).unwrap();
        let fetched = || paged.state.lock().unwrap().bytes;
        let mut buf = vec![0; 40];
        let at = bytes.len() as u64 - 40;
        paged.read_exact_at(&mut buf, at).unwrap();
        assert_eq!(buf, bytes[at as usize..]);
        assert_eq!(fetched(), PAGE, "the last page only");
        // Across a page boundary: the two pages, one of them already here.
        let mut buf = vec![0; 100];
        paged.read_exact_at(&mut buf, 3 * PAGE - 50).unwrap();
        assert_eq!(buf, bytes[3 * PAGE as usize - 50..3 * PAGE as usize + 50]);
        assert_eq!(fetched(), 3 * PAGE);
        paged.read_exact_at(&mut buf, at - 60).unwrap();
        assert_eq!(fetched(), 3 * PAGE, "a page is fetched once");
        // A quarter of it fetched: the next read brings the rest, and nothing after.
        paged.read_exact_at(&mut buf, 5 * PAGE).unwrap();
        assert_eq!(fetched(), 4 * PAGE);
        paged.read_exact_at(&mut buf, 9 * PAGE).unwrap();
        assert_eq!(fetched(), bytes.len() as u64);
        let mut all = vec![0; bytes.len()];
        paged.read_exact_at(&mut all, 0).unwrap();
        assert_eq!(all, bytes);
        assert!(paged
            .read_exact_at(&mut buf, bytes.len() as u64 - 10)
            .is_err());
    }

    #[test]
    fn a_replaced_object_is_an_error_not_a_mix() {
        let Some((store, bytes, reference)) = object("replaced") else {
            return;
        };
        let key = ObjectPath::from(reference.key.as_str());
        let paged = Paged::new(store.clone(), reference).unwrap();
        let mut buf = vec![0; 10];
        paged.read_exact_at(&mut buf, 0).unwrap();
        runtime()
            .unwrap()
            .block_on(store.put(&key, PutPayload::from(vec![7u8; bytes.len()])))
            .unwrap();
        let err = paged.read_exact_at(&mut buf, 8 * PAGE).unwrap_err();
        assert!(
            format!("{err:#}").contains("changed in the bucket"),
            "{err:#}"
        );
    }

    #[test]
    fn missing_pages_come_as_runs() {
        let have = [true, false, false, true, false, true, false];
        assert_eq!(missing_runs(&have, 0, 7), vec![(1, 3), (4, 5), (6, 7)]);
        assert_eq!(missing_runs(&have, 2, 4), vec![(2, 3)]);
        assert!(missing_runs(&have, 3, 4).is_empty());
    }
}
