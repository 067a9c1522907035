//! Object URLs as the command line and job files give them: `s3://BUCKET/KEY-OR-PREFIX`.

use std::path::Path;

use anyhow::{bail, Result};

use crate::core::error::UsageError;

/// An object location: a bucket and a key (or key prefix) inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ObjectUrl {
    pub(crate) bucket: String,
    /// No leading `/`; empty for the whole bucket.
    pub(crate) key: String,
}

impl ObjectUrl {
    /// The URL of `key` in the same bucket.
    #[cfg(feature = "s3")]
    pub(crate) fn with_key(&self, key: &str) -> ObjectUrl {
        ObjectUrl {
            bucket: self.bucket.clone(),
            key: key.to_string(),
        }
    }
}

impl std::fmt::Display for ObjectUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.key)
    }
}

/// True when `arg` names an object rather than a local path: it has a URL scheme.
pub(crate) fn is_url(arg: &str) -> bool {
    arg.split_once("://")
        .is_some_and(|(scheme, _)| !scheme.is_empty() && scheme.chars().all(is_scheme_char))
}

/// True for a path given as a URL (see [`is_url`]).
pub(crate) fn is_url_path(path: &Path) -> bool {
    path.to_str().is_some_and(is_url)
}

fn is_scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

/// Parses `s3://BUCKET/KEY`. Refuses other schemes, and a URL with credentials in it
/// (`s3://KEY:SECRET@bucket/...`) without repeating any of it: credentials come from the
/// `AWS_*` environment variables only, so they never reach a journal, a log or `--json`.
pub(crate) fn parse(arg: &str) -> Result<ObjectUrl> {
    let Some((scheme, rest)) = arg.split_once("://") else {
        bail!(UsageError(format!("{arg} is not a URL")));
    };
    let (authority, key) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.contains('@') {
        bail!(UsageError(format!(
            "an {scheme}:// URL must not carry credentials (it would be written to the \
             journal, the manifest and every message); give them as AWS_ACCESS_KEY_ID and \
             AWS_SECRET_ACCESS_KEY instead"
        )));
    }
    if scheme != "s3" {
        bail!(UsageError(format!(
            "{scheme}:// is not supported: inputs are local paths or s3://BUCKET/KEY URLs"
        )));
    }
    let valid_bucket = (3..=63).contains(&authority.len())
        && authority
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !valid_bucket {
        bail!(UsageError(format!(
            "{arg}: {authority:?} is not an S3 bucket name (3 to 63 lowercase letters, digits, \
             '-' or '.')"
        )));
    }
    if key.split('/').any(|part| part == "." || part == "..") {
        bail!(UsageError(format!(
            "{arg}: a key with '.' or '..' components names no object"
        )));
    }
    Ok(ObjectUrl {
        bucket: authority.to_string(),
        key: key.trim_start_matches('/').to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url("s3://bucket/key.csv"));
        assert!(is_url("gs://b/k"));
        assert!(!is_url("data/in.csv"));
        assert!(!is_url("/abs/path://odd"));
        assert!(!is_url("://nothing"));
        assert!(is_url_path(Path::new("s3://bucket/prefix/")));
        assert!(!is_url_path(Path::new("landing/2026/a.csv")));
    }

    #[test]
    fn an_s3_url_splits_into_bucket_and_key() {
        let url = parse("s3://my-bucket/landing/2026/a.csv").unwrap();
        assert_eq!(url.bucket, "my-bucket");
        assert_eq!(url.key, "landing/2026/a.csv");
        assert_eq!(url.to_string(), "s3://my-bucket/landing/2026/a.csv");
        assert_eq!(parse("s3://bkt").unwrap().key, "");
        assert_eq!(parse("s3://bkt/").unwrap().key, "");
    }

    #[test]
    fn credentials_in_a_url_are_refused_without_being_repeated() {
        let err = parse("s3://AKIDEXAMPLE:s3cr3t-VALUE@bucket/key").unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("must not carry credentials"), "{text}");
        assert!(!text.contains("s3cr3t-VALUE"), "{text}");
        assert!(!text.contains("AKIDEXAMPLE"), "{text}");
        assert!(err.downcast_ref::<UsageError>().is_some());
    }

    #[test]
    fn other_schemes_and_bad_buckets_are_usage_errors() {
        for bad in [
            "gs://bucket/k",
            "s3://Upper/k",
            "s3://ab/k",
            "s3://b_x/k",
            "s3://bkt/a/../b",
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.downcast_ref::<UsageError>().is_some(), "{bad}: {err:#}");
        }
    }
}
