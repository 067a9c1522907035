//! What an input's name says it holds: JSON lines or CSV, compressed or not. The one
//! place these naming conventions live, for the reader, the content hash and the plan.

/// True for JSON lines inputs: `.jsonl` or `.ndjson`, possibly compressed.
pub(crate) fn is_jsonl(path: &str) -> bool {
    let plain = path
        .strip_suffix(".gz")
        .or_else(|| path.strip_suffix(".zst"))
        .unwrap_or(path);
    plain.ends_with(".jsonl") || plain.ends_with(".ndjson")
}

/// True for inputs read through a decompressor (their size on disk is not the number of
/// bytes the parser sees).
pub(crate) fn is_compressed(path: &str) -> bool {
    path.ends_with(".gz") || path.ends_with(".zst")
}
