//! A table in an S3-compatible bucket: the object operations the protocol needs, each a
//! blocking call on the shared client runtime (`s3.rs`), each keyed relative to the
//! table's prefix (`s3://BUCKET/PREFIX/` + `country=US/part-….csv`).
//!
//! - [`Bucket::put`] with [`Mode::Create`] or [`Mode::Replace`]: `If-None-Match: *` or
//!   `If-Match: ETAG`, so a second writer loses cleanly ([`Put::Conflict`]).
//! - [`Bucket::upload_all`]: preCommit of a data file, a multipart upload whose parts are
//!   all uploaded and which is *not* completed: durable in the store, invisible to every
//!   listing. [`Bucket::complete_all`] is the commit: `CompleteMultipartUpload` with
//!   `If-None-Match: *`, so an object already at the key is never replaced.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::StreamExt;
use object_store::aws::AmazonS3;
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::s3::{client, create_only_client, flat, runtime};
use crate::core::hash::hash_hex;
use crate::core::protocol::Upload;
use crate::core::url::ObjectUrl;

/// Parts of a multipart upload: S3's minimum for every part but the last is 5 MiB.
const PART_SIZE: usize = 8 * 1024 * 1024;

/// Parts in flight at once when they are full-size: few enough that parts in memory
/// stay at 64 MiB ([`parts_in_flight`]).
const IN_FLIGHT: usize = 8;

/// Requests in flight at once when they carry little or no body (starting and completing
/// uploads, small parts): a checkpoint over 4,000 partitions makes 12,000 of them. Through
/// a proxy adding 10 ms to each request, that load took 30.5-31.5 s with 8 at a time and
/// 17.6-18.6 s with 32 (18.3 s and 16.8 s without the proxy).
const REQUESTS_IN_FLIGHT: usize = 32;

/// Parts in flight at once when the largest is `largest` bytes: as many as fit in the
/// memory of `IN_FLIGHT` full parts, from `IN_FLIGHT` to `REQUESTS_IN_FLIGHT`.
fn parts_in_flight(largest: usize) -> usize {
    (IN_FLIGHT * PART_SIZE / largest.max(1)).clamp(IN_FLIGHT, REQUESTS_IN_FLIGHT)
}

/// A file's size and content hash.
fn hash_file(path: &Path) -> Result<(u64, String)> {
    let mut file = std::fs::File::open(path)
        .with_context(|| format!("cannot open staged file {}", path.display()))?;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("cannot read staged file {}", path.display()))?;
        if n == 0 {
            return Ok((size, hash_hex(hasher.digest128())));
        }
        hasher.update(&buf[..n]);
        size += n as u64;
    }
}

/// `len` bytes of a file from `at`.
fn read_range(path: &Path, at: u64, len: usize) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path)
        .with_context(|| format!("cannot open staged file {}", path.display()))?;
    let mut part = vec![0u8; len];
    file.read_exact_at(&mut part, at)
        .with_context(|| format!("cannot read staged file {}", path.display()))?;
    Ok(part)
}

/// How a conditional write treats an object already at the key.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
    /// Only if no object is there (`If-None-Match: *`).
    Create,
    /// Only if the object there still has this ETag (`If-Match`).
    Replace(String),
    /// Whatever is there (for files only this process writes, under its lease).
    Overwrite,
}

/// The outcome of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Put {
    /// Written; the new object's ETag.
    Done(Option<String>),
    /// The condition failed: another writer got there first.
    Conflict,
}

/// What [`Bucket::complete_all`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completed {
    /// This call made the object visible.
    Published,
    /// The object was already there with the upload's exact bytes (an earlier attempt
    /// completed it before a crash).
    AlreadyThere,
}

/// One table's objects.
pub(crate) struct Bucket {
    url: ObjectUrl,
    store: Arc<AmazonS3>,
    create_only: AmazonS3,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({})", self.url)
    }
}

impl Bucket {
    /// The table at `url` (a prefix; a trailing `/` is optional).
    pub(crate) fn open(url: &ObjectUrl) -> Result<Bucket> {
        let url = ObjectUrl {
            bucket: url.bucket.clone(),
            key: url.key.trim_matches('/').to_string(),
        };
        Ok(Bucket {
            store: client(&url.bucket)?,
            create_only: create_only_client(&url.bucket)?,
            url,
        })
    }

    /// The table at `url`, through given clients (unit tests: `s3::test_clients`).
    #[cfg(test)]
    pub(crate) fn with_clients(
        url: ObjectUrl,
        store: Arc<AmazonS3>,
        create_only: AmazonS3,
    ) -> Bucket {
        Bucket {
            store,
            create_only,
            url,
        }
    }

    /// The table's URL.
    pub(crate) fn url(&self) -> &ObjectUrl {
        &self.url
    }

    /// The key of `rel`, a `/`-separated path relative to the table.
    fn key(&self, rel: &str) -> ObjectPath {
        if self.url.key.is_empty() {
            ObjectPath::from(rel)
        } else {
            ObjectPath::from(format!("{}/{rel}", self.url.key))
        }
    }

    /// The URL of `rel`, for messages.
    pub(crate) fn url_of(&self, rel: &str) -> ObjectUrl {
        self.url.with_key(self.key(rel).as_ref())
    }

    /// The object at `rel` and its ETag, or `None`.
    pub(crate) fn get(&self, rel: &str) -> Result<Option<(Bytes, Option<String>)>> {
        let rt = runtime()?;
        let got = rt.block_on(async {
            let got = self.store.get(&self.key(rel)).await?;
            let etag = got.meta.e_tag.clone();
            Ok::<_, object_store::Error>((got.bytes().await?, etag))
        });
        match got {
            Ok(got) => Ok(Some(got)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(flat(e)).with_context(|| format!("cannot read {}", self.url_of(rel))),
        }
    }

    /// The last `len` bytes of the object at `rel`, whose size is `size` (all of it if it
    /// is shorter): one ranged GET, for a file's footer.
    pub(crate) fn tail(&self, rel: &str, size: u64, len: u64) -> Result<Bytes> {
        let range = size.saturating_sub(len)..size;
        runtime()?
            .block_on(self.store.get_range(&self.key(rel), range))
            .map_err(flat)
            .with_context(|| format!("cannot read {}", self.url_of(rel)))
    }

    /// [`Bucket::tail`] of each of `files` (path, size, bytes wanted), concurrently, at
    /// most `IN_FLIGHT` requests at once; in order.
    pub(crate) fn tails(&self, files: &[(&str, u64, u64)]) -> Result<Vec<Bytes>> {
        use futures::stream::{self, TryStreamExt};
        let requests = files.iter().map(|(rel, size, len)| async move {
            let range = size.saturating_sub(*len)..*size;
            self.store
                .get_range(&self.key(rel), range)
                .await
                .map_err(flat)
                .with_context(|| format!("cannot read {}", self.url_of(rel)))
        });
        runtime()?.block_on(stream::iter(requests).buffered(IN_FLIGHT).try_collect())
    }

    /// Copies the object at `rel` into a new local file `to`, streamed (bounded memory);
    /// fails unless it has `size` bytes (the size the table's log gives). Not fsynced: a
    /// scratch copy, which a crash makes the next attempt fetch again.
    pub(crate) fn download(&self, rel: &str, size: u64, to: &Path) -> Result<()> {
        use std::io::Write;
        let mut file = crate::core::sys::fsutil::create_new(to)?;
        let got = runtime()?.block_on(async {
            let got = self.store.get(&self.key(rel)).await?;
            let mut stream = got.into_stream();
            let mut written = 0u64;
            while let Some(chunk) = stream.next().await {
                let chunk = chunk?;
                written += chunk.len() as u64;
                if let Err(e) = file.write_all(&chunk) {
                    return Ok(Err(e));
                }
            }
            Ok::<_, object_store::Error>(Ok(written))
        });
        let written = got
            .map_err(flat)
            .with_context(|| format!("cannot read {}", self.url_of(rel)))?
            .with_context(|| format!("cannot write {}", to.display()))?;
        if written != size {
            bail!(
                "{} has {written} bytes, not the {size} bytes the table's log gives it",
                self.url_of(rel)
            );
        }
        Ok(())
    }

    /// Writes `bytes` to `rel` if `mode` allows.
    pub(crate) fn put(&self, rel: &str, bytes: Vec<u8>, mode: Mode) -> Result<Put> {
        let mode = match mode {
            Mode::Create => PutMode::Create,
            Mode::Replace(e_tag) => PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag),
                version: None,
            }),
            Mode::Overwrite => PutMode::Overwrite,
        };
        let put = runtime()?.block_on(self.store.put_opts(
            &self.key(rel),
            PutPayload::from(bytes),
            PutOptions::from(mode),
        ));
        match put {
            Ok(done) => Ok(Put::Done(done.e_tag)),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Put::Conflict),
            Err(e) => Err(flat(e)).with_context(|| format!("cannot write {}", self.url_of(rel))),
        }
    }

    /// Removes `rel`; an absent object is not an error.
    pub(crate) fn delete(&self, rel: &str) -> Result<()> {
        match runtime()?.block_on(self.store.delete(&self.key(rel))) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(flat(e)).with_context(|| format!("cannot remove {}", self.url_of(rel))),
        }
    }

    /// Every object under `rel_prefix` (a directory-like prefix, without the trailing
    /// `/`), as (path relative to the table, size), in key order.
    pub(crate) fn list(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>> {
        Ok(self
            .list_tagged(rel_prefix)?
            .into_iter()
            .map(|(rel, size, _)| (rel, size))
            .collect())
    }

    /// [`Bucket::list`] with each object's ETag.
    pub(crate) fn list_tagged(
        &self,
        rel_prefix: &str,
    ) -> Result<Vec<(String, u64, Option<String>)>> {
        let prefix = self.key(rel_prefix);
        let listed = runtime()?
            .block_on(async {
                let mut stream = self.store.list(Some(&prefix));
                let mut out = Vec::new();
                while let Some(meta) = stream.next().await {
                    out.push(meta?);
                }
                Ok::<_, object_store::Error>(out)
            })
            .map_err(flat)
            .with_context(|| format!("cannot list {}", self.url_of(rel_prefix)))?;
        let skip = if self.url.key.is_empty() {
            0
        } else {
            self.url.key.len() + 1
        };
        let mut out: Vec<(String, u64, Option<String>)> = listed
            .into_iter()
            .filter_map(|meta| {
                let key = meta.location.as_ref();
                let rel = key.get(skip..)?.to_string();
                Some((rel, meta.size, meta.e_tag))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The names one level below `rel_prefix` that have objects under them.
    pub(crate) fn children(&self, rel_prefix: &str) -> Result<Vec<String>> {
        let prefix = self.key(rel_prefix);
        let listed = runtime()?
            .block_on(self.store.list_with_delimiter(Some(&prefix)))
            .map_err(flat)
            .with_context(|| format!("cannot list {}", self.url_of(rel_prefix)))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The size of the object at `rel`, or `None`.
    pub(crate) fn size(&self, rel: &str) -> Result<Option<u64>> {
        match runtime()?.block_on(self.store.head(&self.key(rel))) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(flat(e)).with_context(|| format!("cannot read {}", self.url_of(rel))),
        }
    }

    /// The content hash of the object at `rel`, streamed (bounded memory).
    async fn hash_async(&self, rel: &str) -> Result<String> {
        async {
            let got = self.store.get(&self.key(rel)).await?;
            let mut hasher = xxhash_rust::xxh3::Xxh3::new();
            let mut stream = got.into_stream();
            while let Some(chunk) = stream.next().await {
                hasher.update(&chunk?);
            }
            Ok::<_, object_store::Error>(hash_hex(hasher.digest128()))
        }
        .await
        .map_err(flat)
        .with_context(|| format!("cannot read {}", self.url_of(rel)))
    }

    /// preCommit of a checkpoint's data files: each local `file` becomes a multipart
    /// upload to its `rel`, every part sent, and left open. Requests run concurrently,
    /// parts of one file too, at most [`parts_in_flight`] parts at once, so memory stays
    /// at that of `IN_FLIGHT` full parts whatever the files' number and size. If
    /// anything fails, the uploads started here are aborted before the error returns.
    pub(crate) fn upload_all(&self, files: &[(&str, &Path)]) -> Result<Vec<Upload>> {
        use futures::stream::{self, StreamExt, TryStreamExt};
        let rt = runtime()?;
        // The content hash of each file, read sequentially (it is in the page cache).
        let mut sized = Vec::with_capacity(files.len());
        for (_, path) in files {
            sized.push(hash_file(path)?);
        }
        let ids: Vec<Result<String>> = rt.block_on(
            stream::iter(files.iter().map(|(rel, _)| async move {
                self.store
                    .create_multipart(&self.key(rel))
                    .await
                    .map_err(flat)
                    .with_context(|| format!("cannot start the upload of {}", self.url_of(rel)))
            }))
            .buffered(REQUESTS_IN_FLIGHT)
            .collect(),
        );
        let started: Vec<(usize, String)> = ids
            .iter()
            .enumerate()
            .filter_map(|(i, id)| id.as_ref().ok().map(|id| (i, id.clone())))
            .collect();
        let sent = (|| {
            let ids = ids
                .iter()
                .map(|id| id.as_ref().map_err(|e| anyhow::anyhow!("{e:#}")).cloned())
                .collect::<Result<Vec<String>>>()?;
            let jobs: Vec<(usize, usize, u64, usize)> = sized
                .iter()
                .enumerate()
                .flat_map(|(f, (size, _))| {
                    let parts = (*size as usize).div_ceil(PART_SIZE).max(1);
                    (0..parts).map(move |p| {
                        let at = (p * PART_SIZE) as u64;
                        let len = PART_SIZE.min((*size - at) as usize);
                        (f, p, at, len)
                    })
                })
                .collect();
            let in_flight = parts_in_flight(jobs.iter().map(|&(.., len)| len).max().unwrap_or(0));
            let done: Vec<(usize, usize, String)> = rt.block_on(
                stream::iter(jobs.into_iter().map(|(f, p, at, len)| {
                    let (rel, path) = files[f];
                    let id = &ids[f];
                    async move {
                        let part = read_range(path, at, len)?;
                        let put = self
                            .store
                            .put_part(&self.key(rel), id, p, PutPayload::from(part))
                            .await
                            .map_err(flat)
                            .with_context(|| {
                                format!("cannot upload a part of {}", self.url_of(rel))
                            })?;
                        Ok::<_, anyhow::Error>((f, p, put.content_id))
                    }
                }))
                .buffer_unordered(in_flight)
                .try_collect(),
            )?;
            let mut parts: Vec<Vec<String>> = sized
                .iter()
                .map(|(size, _)| vec![String::new(); (*size as usize).div_ceil(PART_SIZE).max(1)])
                .collect();
            for (f, p, etag) in done {
                parts[f][p] = etag;
            }
            Ok(ids
                .into_iter()
                .zip(parts)
                .zip(sized)
                .map(|((id, parts), (_, hash))| Upload { id, parts, hash })
                .collect())
        })();
        if sent.is_err() {
            // Best effort: `--recover` or a lifecycle rule cleans up what this cannot.
            for (i, id) in &started {
                let _ = self.abort(files[*i].0, id);
            }
        }
        sent
    }

    /// Every multipart upload open under `rel_prefix`, as (path relative to the table,
    /// upload id), through the S3 API's `ListMultipartUploads` (see
    /// `s3::UploadLister`). Bounded: at most 10,000 pages of 1,000.
    pub(crate) fn open_uploads(&self, rel_prefix: &str) -> Result<Vec<(String, String)>> {
        use object_store::aws::AwsAuthorizer;
        use object_store::client::HttpRequestBody;

        let lister = super::s3::upload_lister(&self.url.bucket)?;
        let prefix = self.key(rel_prefix).to_string();
        let rt = runtime()?;
        let what = || {
            format!(
                "cannot list the open uploads under {}",
                self.url_of(rel_prefix)
            )
        };
        let mut found = Vec::new();
        let mut marker: Option<(String, String)> = None;
        for _ in 0..10_000 {
            let mut url = url::Url::parse(&lister.base).with_context(what)?;
            {
                let mut query = url.query_pairs_mut();
                query
                    .append_key_only("uploads")
                    .append_pair("prefix", &prefix);
                if let Some((key, id)) = &marker {
                    query
                        .append_pair("key-marker", key)
                        .append_pair("upload-id-marker", id);
                }
            }
            let body = rt
                .block_on(async {
                    let credential = self.store.credentials().get_credential().await?;
                    let mut request = http::Request::get(url.as_str())
                        .body(HttpRequestBody::empty())
                        .map_err(|e| object_store::Error::Generic {
                            store: "S3",
                            source: Box::new(e),
                        })?;
                    AwsAuthorizer::new(&credential, "s3", &lister.region)
                        .try_authorize(&mut request, None)?;
                    let response = lister.http.execute(request).await.map_err(|e| {
                        object_store::Error::Generic {
                            store: "S3",
                            source: Box::new(e),
                        }
                    })?;
                    let status = response.status();
                    let bytes = response.into_body().bytes().await.map_err(|e| {
                        object_store::Error::Generic {
                            store: "S3",
                            source: Box::new(e),
                        }
                    })?;
                    Ok::<_, object_store::Error>((status, bytes))
                })
                .map_err(flat)
                .with_context(what)?;
            let (status, bytes) = body;
            if !status.is_success() {
                bail!(
                    "{}: the store answered {status}: {}",
                    what(),
                    String::from_utf8_lossy(&bytes)
                );
            }
            let page: ListUploads = quick_xml::de::from_reader(&bytes[..])
                .with_context(|| format!("{}: an answer that is not a listing", what()))?;
            let skip = if self.url.key.is_empty() {
                0
            } else {
                self.url.key.len() + 1
            };
            found.extend(
                page.uploads
                    .into_iter()
                    .filter_map(|u| Some((u.key.get(skip..)?.to_string(), u.upload_id))),
            );
            match (
                page.is_truncated,
                page.next_key_marker,
                page.next_upload_id_marker,
            ) {
                (true, Some(key), Some(id)) => marker = Some((key, id)),
                _ => return Ok(found),
            }
        }
        bail!("{}: more than 10,000 pages", what())
    }

    /// Aborts the multipart upload `id` to `rel`; one already gone is not an error.
    pub(crate) fn abort(&self, rel: &str, id: &str) -> Result<()> {
        match runtime()?.block_on(self.store.abort_multipart(&self.key(rel), &id.to_string())) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(flat(e))
                .with_context(|| format!("cannot abort the open upload of {}", self.url_of(rel))),
        }
    }

    /// commit of several files, concurrently (`REQUESTS_IN_FLIGHT` at once): each
    /// outcome, in order.
    pub(crate) fn complete_all(
        &self,
        files: &[(&str, &Upload, u64)],
    ) -> Result<Vec<Result<Completed>>> {
        use futures::stream::{self, StreamExt};
        let rt = runtime()?;
        Ok(rt.block_on(
            stream::iter(files.iter().map(|(rel, upload, size)| async move {
                self.complete_async(rel, upload, *size).await
            }))
            .buffered(REQUESTS_IN_FLIGHT)
            .collect(),
        ))
    }

    /// commit of one data file: completes `upload` at `rel` unless an object is already
    /// there. Idempotent: when the object there has the upload's size and content hash,
    /// an earlier attempt published it and this one is done too. Anything else at the
    /// key is another writer's and stays untouched: an error, not a clobber.
    async fn complete_async(&self, rel: &str, upload: &Upload, size: u64) -> Result<Completed> {
        let parts = upload
            .parts
            .iter()
            .map(|content_id| PartId {
                content_id: content_id.clone(),
            })
            .collect();
        let done = self
            .create_only
            .complete_multipart(&self.key(rel), &upload.id, parts)
            .await;
        let why = match done {
            Ok(_) => return Ok(Completed::Published),
            Err(e) => flat(e),
        };
        let found = match self.store.head(&self.key(rel)).await {
            Ok(meta) => Some(meta.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => {
                return Err(flat(e)).with_context(|| format!("cannot read {}", self.url_of(rel)))
            }
        };
        match found {
            Some(found) if found == size && self.hash_async(rel).await? == upload.hash => {
                Ok(Completed::AlreadyThere)
            }
            Some(found) => bail!(
                "{} already exists ({found} bytes) and is not the file this run staged for it \
                 ({size} bytes); it was left untouched",
                self.url_of(rel)
            ),
            None => Err(why).with_context(|| {
                format!(
                    "cannot publish {}: its upload is gone and the object is not there; the \
                     table may have lost rows",
                    self.url_of(rel)
                )
            }),
        }
    }
}

/// A page of `ListMultipartUploads`.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListUploads {
    #[serde(default)]
    is_truncated: bool,
    next_key_marker: Option<String>,
    next_upload_id_marker: Option<String>,
    #[serde(rename = "Upload", default)]
    uploads: Vec<OpenUpload>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
struct OpenUpload {
    key: String,
    upload_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_parts_go_more_at_once_in_the_memory_of_full_ones() {
        assert_eq!(parts_in_flight(PART_SIZE), IN_FLIGHT);
        assert_eq!(parts_in_flight(PART_SIZE / 2), 2 * IN_FLIGHT);
        assert_eq!(parts_in_flight(64 * 1024), REQUESTS_IN_FLIGHT);
        assert_eq!(parts_in_flight(0), REQUESTS_IN_FLIGHT);
        for largest in [1, 4096, 1 << 20, 3 << 20, PART_SIZE / 2 + 1, PART_SIZE] {
            let n = parts_in_flight(largest);
            assert!(
                n * largest <= IN_FLIGHT * PART_SIZE,
                "{n} parts of {largest} bytes"
            );
        }
    }
}
