//! Where bytes live. Today: local paths, and objects in S3-compatible stores (`s3.rs`)
//! read as inputs. An input or target argument is either a local path or a URL; this
//! module tells them apart and refuses, before anything is contacted, what it cannot
//! serve or must not echo (a URL carrying credentials).

#[cfg(feature = "s3")]
pub mod s3;
pub mod url;
