//! A Delta table in a bucket (`--target s3://…`): delta-rs's log store over an S3 client
//! built from the same `AWS_*` environment as the rest of `ingest` (`storage/s3.rs`).
//!
//! delta-rs commits `_delta_log/V.json` with a put-if-absent (`If-None-Match: *`), which
//! S3 and the S3-compatible stores that `ingest` already needs for its own state honour
//! (`storage/bucket.rs`): of two writers racing for version V exactly one gets it, the
//! other retries at V+1 after delta-rs's conflict check. No lock table (DynamoDB) is
//! involved. A PUT the store acknowledged is durable, so nothing is settled here as it is
//! for a local table (`log.rs`).
//!
//! delta-rs finds a store and a log store for a URL scheme in two process-wide
//! registries; `register` adds `s3://` to both, once.

use std::sync::{Arc, OnceLock};

use anyhow::{anyhow, Context, Result};
use deltalake::logstore::{
    default_logstore, logstore_factories, object_store_factories, LogStore, LogStoreFactory,
    ObjectStoreFactory, ObjectStoreRef, StorageConfig,
};
use deltalake::{DeltaResult, DeltaTableError};
use object_store_delta::aws::{AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store_delta::path::Path as ObjectPath;
use object_store_delta::{BackoffConfig, ClientConfigKey, RetryConfig};
use url::Url;

use crate::core::url::ObjectUrl;

/// The table's URL for delta-rs: `s3://BUCKET/KEY/`.
pub(crate) fn table_url(target: &ObjectUrl) -> Result<Url> {
    let key = target.key.trim_end_matches('/');
    let text = if key.is_empty() {
        format!("s3://{}/", target.bucket)
    } else {
        format!("s3://{}/{key}/", target.bucket)
    };
    Url::parse(&text).with_context(|| format!("{target} cannot be named by a URL"))
}

/// Makes `s3://` URLs known to delta-rs: the object store and the log store behind them.
pub(crate) fn register() -> Result<()> {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    let scheme = Url::parse("s3://").map_err(|e| anyhow!("s3:// is not a URL: {e}"))?;
    REGISTERED.get_or_init(|| {
        object_store_factories().insert(scheme.clone(), Arc::new(S3Stores));
        logstore_factories().insert(scheme, Arc::new(PutIfAbsentLog));
    });
    Ok(())
}

/// Clients for a bucket, from the `AWS_*` environment.
struct S3Stores;

impl ObjectStoreFactory for S3Stores {
    fn parse_url_opts(
        &self,
        url: &Url,
        _: &StorageConfig,
    ) -> DeltaResult<(ObjectStoreRef, ObjectPath)> {
        let bucket = url.host_str().ok_or_else(|| {
            DeltaTableError::InvalidTableLocation(format!("{url} names no bucket"))
        })?;
        let path = ObjectPath::from_url_path(url.path())
            .map_err(|e| DeltaTableError::InvalidTableLocation(format!("{url}: {e}")))?;
        Ok((Arc::new(client(bucket)?), path))
    }
}

/// The client for `bucket`, configured as `storage/s3.rs` configures its own (the same
/// bounds on retries and connect time, in that object_store version's types), and with
/// conditional puts (If-None-Match) for the commits.
fn client(bucket: &str) -> object_store_delta::Result<object_store_delta::aws::AmazonS3> {
    use crate::storage::s3::{CONNECT_TIMEOUT, MAX_RETRIES, RETRY_TIMEOUT};
    let retry = RetryConfig {
        backoff: BackoffConfig::default(),
        max_retries: MAX_RETRIES,
        retry_timeout: RETRY_TIMEOUT,
    };
    let connect = AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout);
    AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(retry)
        .with_config(connect, CONNECT_TIMEOUT)
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
}

/// delta-rs's default log store: each commit a put-if-absent of its version's file.
struct PutIfAbsentLog;

impl LogStoreFactory for PutIfAbsentLog {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_becomes_a_directory_url_of_its_bucket() {
        let url = |bucket: &str, key: &str| {
            table_url(&ObjectUrl {
                bucket: bucket.into(),
                key: key.into(),
            })
            .unwrap()
            .to_string()
        };
        assert_eq!(url("b", "tables/orders"), "s3://b/tables/orders/");
        assert_eq!(url("b", "tables/orders/"), "s3://b/tables/orders/");
        assert_eq!(url("b", ""), "s3://b/");
        assert_eq!(url("b", "a b"), "s3://b/a%20b/");
    }
}
