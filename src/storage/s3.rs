//! Objects in S3-compatible stores, through the `object_store` crate (Apache Arrow's;
//! it signs, retries and streams, so nothing here speaks HTTP).
//!
//! Configuration is the standard `AWS_*` environment (read by
//! `AmazonS3Builder::from_env`): `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`), `AWS_ENDPOINT_URL` for a
//! store other than AWS, and `AWS_ALLOW_HTTP=true` for one served over plain http.
//! Requests are path-style unless `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true`.
//!
//! `object_store` is async; `ingest`'s pipeline is threads. One small runtime serves
//! every request, and a download is a task that feeds a bounded channel, which the
//! reading thread drains as a plain `Read`: memory stays at a few chunks per input
//! whatever its size, and the network overlaps the parsing.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, ObjectMeta, ObjectStore, ObjectStoreExt,
    RetryConfig,
};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use crate::core::protocol::Fingerprint;
use crate::core::url::ObjectUrl;

/// Chunks a download may run ahead of its reader.
const READ_AHEAD_CHUNKS: usize = 8;

pub(crate) fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("ingest-s3")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| anyhow!("cannot start the object-store client: {e}"))
}

/// The client for `bucket`, built once from the environment.
pub(crate) fn client(bucket: &str) -> Result<Arc<AmazonS3>> {
    static CLIENTS: OnceLock<Mutex<HashMap<String, Arc<AmazonS3>>>> = OnceLock::new();
    let clients = CLIENTS.get_or_init(Mutex::default);
    let mut clients = clients
        .lock()
        .map_err(|_| anyhow!("the object-store client table is poisoned"))?;
    if let Some(client) = clients.get(bucket) {
        return Ok(client.clone());
    }
    let client = Arc::new(configured(bucket, http::HeaderMap::new())?);
    clients.insert(bucket.to_string(), client.clone());
    Ok(client)
}

/// A client for `bucket` whose every request carries `If-None-Match: *`, used for one
/// request only: completing a multipart upload that another process (or this one, before
/// a crash) started. `object_store`'s `MultipartStore::complete_multipart` always
/// overwrites; its conditional completion exists only for uploads whose handle lives in
/// memory, which a recovery on another machine does not have.
pub(crate) fn create_only_client(bucket: &str) -> Result<AmazonS3> {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::IF_NONE_MATCH,
        http::HeaderValue::from_static("*"),
    );
    configured(bucket, headers)
}

/// The type every request that carries bytes declares for them (and the one S3 gives an
/// object uploaded without one). `object_store` sends none on `UploadPart`, and a store
/// may then guess: SeaweedFS sniffs each part, finds text in a CSV one and gzips it at
/// rest, which cost it about twice the CPU per byte of an upload it is told the type of
/// (`bench/s3.py`; the AWS SDKs, and so pyarrow, send this type). Readers get the same
/// bytes either way.
const CONTENT_TYPE: &str = "binary/octet-stream";

/// A client for `bucket` from the environment, whose requests carry `headers` (unless
/// a request sets one itself) and [`CONTENT_TYPE`]. Default headers belong to the
/// client's HTTP options, so the environment's HTTP settings are carried across.
fn configured(bucket: &str, mut headers: http::HeaderMap) -> Result<AmazonS3> {
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(CONTENT_TYPE),
    );
    let from_env = builder(bucket);
    refuse_plain_http(&from_env)?;
    let options = client_options(&from_env);
    from_env
        .with_client_options(options.with_default_headers(headers))
        .build()
        .map_err(flat)
        .with_context(|| format!("cannot configure access to bucket {bucket}"))
}

/// Fails, naming the setting, when the endpoint is plain http and http is not allowed:
/// the client would refuse every request with "HTTP error: builder error" instead.
pub(crate) fn refuse_plain_http(from_env: &AmazonS3Builder) -> Result<()> {
    let endpoint = from_env.get_config_value(&AmazonS3ConfigKey::Endpoint);
    let allowed = from_env
        .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
        .is_some_and(|v| {
            // object_store's own reading of a boolean setting.
            ["true", "1", "yes", "on"]
                .iter()
                .any(|t| v.trim().eq_ignore_ascii_case(t))
        });
    match endpoint {
        Some(endpoint) if is_plain_http(&endpoint) && !allowed => Err(anyhow!(
            "the S3 endpoint {endpoint} is plain http, which the client refuses unless \
             told: set AWS_ALLOW_HTTP=true (or use an https endpoint)"
        )),
        _ => Ok(()),
    }
}

/// Whether a URL is plain http (any case of the scheme).
fn is_plain_http(endpoint: &str) -> bool {
    endpoint
        .trim()
        .get(..7)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("http://"))
}

/// The check of [`refuse_plain_http`] for a bucket, for clients built elsewhere (the
/// Delta log's).
#[cfg(feature = "delta")]
pub(crate) fn check_endpoint(bucket: &str) -> Result<()> {
    refuse_plain_http(&builder(bucket))
}

/// The HTTP settings of a configured client, for a client of our own.
fn client_options(from_env: &AmazonS3Builder) -> object_store::ClientOptions {
    let mut options = object_store::ClientOptions::new();
    for key in [
        ClientConfigKey::AllowHttp,
        ClientConfigKey::AllowInvalidCertificates,
        ClientConfigKey::NoSystemCertificates,
        ClientConfigKey::ConnectTimeout,
        ClientConfigKey::DefaultContentType,
        ClientConfigKey::Http1Only,
        ClientConfigKey::Http2KeepAliveInterval,
        ClientConfigKey::Http2KeepAliveTimeout,
        ClientConfigKey::Http2KeepAliveWhileIdle,
        ClientConfigKey::Http2MaxFrameSize,
        ClientConfigKey::Http2Only,
        ClientConfigKey::PoolIdleTimeout,
        ClientConfigKey::PoolMaxIdlePerHost,
        ClientConfigKey::ProxyUrl,
        ClientConfigKey::ProxyCaCertificate,
        ClientConfigKey::ProxyExcludes,
        ClientConfigKey::RandomizeAddresses,
        ClientConfigKey::ReadTimeout,
        ClientConfigKey::Timeout,
        ClientConfigKey::UserAgent,
    ] {
        if let Some(value) = from_env.get_config_value(&AmazonS3ConfigKey::Client(key)) {
            options = options.with_config(key, value);
        }
    }
    options
}

/// What listing open multipart uploads needs: `object_store` has no call for it
/// (`ListMultipartUploads`), so `bucket.rs` makes that one request itself, signed by
/// `object_store`'s own SigV4 signer and sent by its own HTTP client.
pub(crate) struct UploadLister {
    /// The bucket's URL (path-style `ENDPOINT/BUCKET`, or the virtual-hosted endpoint).
    pub(crate) base: String,
    pub(crate) region: String,
    pub(crate) http: object_store::client::HttpClient,
}

pub(crate) fn upload_lister(bucket: &str) -> Result<UploadLister> {
    use object_store::client::HttpConnector;
    let from_env = builder(bucket);
    refuse_plain_http(&from_env)?;
    let get = |key| from_env.get_config_value(&key);
    let region = get(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
    let virtual_hosted = get(AmazonS3ConfigKey::VirtualHostedStyleRequest)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let base = match (get(AmazonS3ConfigKey::Endpoint), virtual_hosted) {
        (Some(endpoint), true) => endpoint.trim_end_matches('/').to_string(),
        (Some(endpoint), false) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
        (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
        (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
    };
    let http = object_store::client::ReqwestConnector::default()
        .connect(&client_options(&from_env))
        .map_err(flat)
        .with_context(|| format!("cannot configure access to bucket {bucket}"))?;
    Ok(UploadLister { base, region, http })
}

/// Retries of a failed request, and the time they may take in all: bounded, so that an
/// unreachable endpoint fails the run in seconds, not minutes, while a store that is
/// briefly throttling (503 SlowDown) is still ridden out. (The Delta log's client,
/// `table/delta/bucket.rs`, is configured alike.)
pub(crate) const MAX_RETRIES: usize = 5;
pub(crate) const RETRY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a connection may take to open.
pub(crate) const CONNECT_TIMEOUT: &str = "10 seconds";

/// The client configuration for `bucket`: the environment, bounded retries and connect.
fn builder(bucket: &str) -> AmazonS3Builder {
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    };
    AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry)
        .with_config(
            AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
            CONNECT_TIMEOUT,
        )
}

/// An `object_store` error as one message: its `Display` already spells out the chain
/// of causes, which `{:#}` would otherwise print a second time. When the environment
/// holds no keys, the client's last resort is the instance metadata service; its
/// failure then means "no credentials", and the message says so.
pub(crate) fn flat(e: object_store::Error) -> anyhow::Error {
    let text = e.to_string();
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() && text.contains("169.254.169.254") {
        return anyhow!(
            "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (profiles in \
             ~/.aws are not read), or run where instance credentials exist ({text})"
        );
    }
    anyhow!("{text}")
}

/// The objects an input URL names: the object at its key if there is one, else every
/// object under it as a prefix, in key order, skipping hidden names (a key component
/// after the prefix that starts with `.` or `_`, as `_SUCCESS` markers and `.tmp` files
/// of other writers do).
pub(crate) fn list(url: &ObjectUrl) -> Result<Vec<Fingerprint>> {
    let store = client(&url.bucket)?;
    let rt = runtime()?;
    if !url.key.is_empty() && !url.key.ends_with('/') {
        match rt.block_on(store.head(&ObjectPath::from(url.key.as_str()))) {
            Ok(meta) => return Ok(vec![fingerprint_of(url, &meta)]),
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(flat(e)).with_context(|| format!("cannot read input {url}")),
        }
    }
    let prefix = url.key.trim_end_matches('/');
    let listed: Vec<ObjectMeta> = rt
        .block_on(async {
            let prefix = (!prefix.is_empty()).then(|| ObjectPath::from(prefix));
            let mut stream = store.list(prefix.as_ref());
            let mut out = Vec::new();
            while let Some(meta) = stream.next().await {
                out.push(meta?);
            }
            Ok::<_, object_store::Error>(out)
        })
        .map_err(flat)
        .with_context(|| format!("cannot list input {url}"))?;
    let mut found: Vec<Fingerprint> = listed
        .iter()
        .filter(|meta| {
            let key = meta.location.as_ref();
            let below = key.strip_prefix(prefix).unwrap_or(key);
            !below.split('/').any(|part| part.starts_with(['.', '_']))
        })
        .map(|meta| fingerprint_of(url, meta))
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    if found.is_empty() {
        bail!("input {url} cannot be read: no object has that key or lies under it");
    }
    Ok(found)
}

fn fingerprint_of(url: &ObjectUrl, meta: &ObjectMeta) -> Fingerprint {
    Fingerprint {
        path: url.with_key(meta.location.as_ref()).to_string(),
        size: meta.size,
        mtime_ns: meta.last_modified.timestamp_nanos_opt().unwrap_or(0),
        dev: 0,
        ino: 0,
        etag: meta.e_tag.clone(),
    }
}

/// The object's identity now (size, time, ETag): what a recovery compares with what the
/// interrupted run recorded.
pub(crate) fn head(url: &ObjectUrl) -> Result<Fingerprint> {
    let store = client(&url.bucket)?;
    let meta = runtime()?
        .block_on(store.head(&ObjectPath::from(url.key.as_str())))
        .map_err(flat)
        .with_context(|| format!("cannot read input {url}"))?;
    Ok(fingerprint_of(url, &meta))
}

/// Opens the object for reading from its first byte. With `etag`, the download is
/// conditional (`If-Match`): an object replaced since it was listed fails the read
/// instead of mixing two versions' bytes into one load.
pub(crate) fn open(url: &ObjectUrl, etag: Option<&str>, from: u64) -> Result<Box<dyn Read + Send>> {
    open_in(&*client(&url.bucket)?, url, etag, from)
}

fn open_in(
    store: &dyn ObjectStore,
    url: &ObjectUrl,
    etag: Option<&str>,
    from: u64,
) -> Result<Box<dyn Read + Send>> {
    let rt = runtime()?;
    let options = GetOptions {
        if_match: etag.map(str::to_string),
        // A resume's ranged GET: the bytes before `from` are not fetched again.
        range: (from > 0).then_some(object_store::GetRange::Offset(from)),
        ..GetOptions::default()
    };
    let location = ObjectPath::from(url.key.as_str());
    let got = rt.block_on(store.get_opts(&location, options));
    let got = match got {
        Ok(got) => got,
        Err(object_store::Error::Precondition { .. }) => bail!(
            "input {url} changed since it was listed (its ETag is no longer {})",
            etag.unwrap_or_default()
        ),
        Err(e) => return Err(flat(e)).with_context(|| format!("cannot open input {url}")),
    };
    let (send, chunks) = mpsc::channel(READ_AHEAD_CHUNKS);
    let mut stream = got.into_stream();
    rt.spawn(async move {
        while let Some(chunk) = stream.next().await {
            let failed = chunk.is_err();
            // A closed channel: the reader is gone, so is the need for the rest.
            if send.send(chunk.map_err(|e| e.to_string())).await.is_err() || failed {
                break;
            }
        }
    });
    Ok(Box::new(Download {
        chunks,
        current: bytes::Bytes::new(),
    }))
}

/// An object's bytes as a `Read`, fed by the download task.
struct Download {
    chunks: mpsc::Receiver<std::result::Result<bytes::Bytes, String>>,
    current: bytes::Bytes,
}

impl Read for Download {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.chunks.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

/// Clients of the store `.ci/test` started, for unit tests elsewhere: the plain one and
/// the create-only one, as [`client`] and [`create_only_client`] make them but with the
/// test store's credentials given explicitly (a test must not set the process
/// environment other threads read). `None` without a store.
#[cfg(test)]
pub(crate) fn test_clients() -> Option<(Arc<AmazonS3>, AmazonS3, String)> {
    let endpoint = std::env::var("INGEST_TEST_S3_ENDPOINT").ok()?;
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let bucket = var("INGEST_TEST_S3_BUCKET");
    let build = |extra: Option<(http::HeaderName, &'static str)>| {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static(CONTENT_TYPE),
        );
        if let Some((name, value)) = extra {
            headers.insert(name, http::HeaderValue::from_static(value));
        }
        AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_region("us-east-1")
            .with_bucket_name(&bucket)
            .with_access_key_id(var("INGEST_TEST_S3_KEY_ID"))
            .with_secret_access_key(var("INGEST_TEST_S3_SECRET"))
            .with_client_options(
                object_store::ClientOptions::new()
                    .with_allow_http(true)
                    .with_default_headers(headers),
            )
            .build()
            .ok()
    };
    let store = build(None)?;
    let create_only = build(Some((http::header::IF_NONE_MATCH, "*")))?;
    Some((Arc::new(store), create_only, bucket))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store `.ci/test` started (explicit credentials: a test must not set the
    /// process environment other threads read), or `None` without one.
    fn test_store() -> Option<(AmazonS3, String)> {
        let endpoint = std::env::var("INGEST_TEST_S3_ENDPOINT").ok()?;
        let var = |name: &str| std::env::var(name).unwrap_or_default();
        let bucket = var("INGEST_TEST_S3_BUCKET");
        let store = AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_bucket_name(&bucket)
            .with_access_key_id(var("INGEST_TEST_S3_KEY_ID"))
            .with_secret_access_key(var("INGEST_TEST_S3_SECRET"))
            .build()
            .unwrap();
        // The store makes the bucket while it starts; wait (bounded) until it can be used.
        let probe = ObjectPath::from(format!("unit-probe-{}", std::process::id()));
        let rt = runtime().unwrap();
        for _ in 0..60 {
            let put = rt.block_on(store.put(&probe, object_store::PutPayload::from_static(b"x")));
            if put.is_ok() {
                return Some((store, bucket));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        panic!("bucket {bucket} never became writable");
    }

    #[test]
    fn a_read_fails_once_the_object_is_no_longer_the_listed_version() {
        let Some((store, bucket)) = test_store() else {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped storage::s3 if-match test: no S3 store (.ci/test starts one)"
            );
            return;
        };
        let rt = runtime().unwrap();
        let key = format!("unit-if-match-{}/a.csv", std::process::id());
        let url = ObjectUrl {
            bucket,
            key: key.clone(),
        };
        let put = |bytes: &'static [u8]| {
            rt.block_on(store.put(
                &ObjectPath::from(key.as_str()),
                object_store::PutPayload::from_static(bytes),
            ))
            .unwrap()
            .e_tag
            .unwrap()
        };
        let first = put(b"id\n1\n");
        let mut text = String::new();
        open_in(&store, &url, Some(&first), 0)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "id\n1\n");

        let second = put(b"id\n1\n2\n");
        assert_ne!(first, second);
        let err = open_in(&store, &url, Some(&first), 0).err().unwrap();
        assert!(
            format!("{err:#}").contains("changed since it was listed"),
            "{err:#}"
        );
        let mut text = String::new();
        open_in(&store, &url, Some(&second), 0)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "id\n1\n2\n");
        // A resume's ranged read: from byte 3 on, still only under the listed ETag.
        let mut text = String::new();
        open_in(&store, &url, Some(&second), 3)
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert_eq!(text, "1\n2\n");
        assert!(open_in(&store, &url, Some(&first), 3).is_err());
    }
}
