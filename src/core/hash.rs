//! How content hashes are written in the journal, the manifest and file names.

/// Formats a content hash the way the journal and manifest store it.
pub(crate) fn hash_hex(hash: u128) -> String {
    format!("{hash:032x}")
}
