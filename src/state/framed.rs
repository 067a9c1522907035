//! Framed state files: the one encoding of the journal, the manifest and the dedupe keys.
//!
//! ```text
//! header  : 8 bytes   a 7-byte magic naming the file, then its format version
//! frame*  : u32 LE    payload length in bytes
//!           u32 LE    CRC-32 (IEEE) of the payload
//!           payload   the file's own record (JSON for the journal and the manifest)
//! ```
//! A crash can tear only the last frame: a reader stops at the first frame that is short
//! or whose checksum fails, and reports where the valid prefix ends, so a writer can
//! truncate the torn tail (durably) before it appends again.

use std::path::Path;

use anyhow::{bail, Result};

pub(crate) const FRAME_HEADER: usize = 8;
const MAX_FRAME: usize = 1 << 30;

/// Encodes one frame (see the module header for the layout).
pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Decodes frames after an 8-byte magic; returns the payloads and the length of the valid
/// prefix of `bytes` (where a torn or corrupt tail begins).
pub(crate) fn decode_frames<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    path: &Path,
) -> Result<(Vec<&'a [u8]>, usize)> {
    if bytes.len() < magic.len() {
        // A crash while the file was being created: nothing in it was ever relied on.
        return Ok((Vec::new(), 0));
    }
    if bytes[..magic.len() - 1] != magic[..magic.len() - 1] {
        bail!("{} is not an ingest state file (bad magic)", path.display());
    }
    if bytes[magic.len() - 1] != magic[magic.len() - 1] {
        bail!(
            "{} has format version {}, this ingest reads version {}",
            path.display(),
            bytes[magic.len() - 1],
            magic[magic.len() - 1]
        );
    }
    let mut frames = Vec::new();
    let mut at = magic.len();
    while bytes.len() - at >= FRAME_HEADER {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let start = at + FRAME_HEADER;
        if len > MAX_FRAME || bytes.len() - start < len {
            break;
        }
        let payload = &bytes[start..start + len];
        if crc32fast::hash(payload) != crc {
            break;
        }
        frames.push(payload);
        at = start + len;
    }
    Ok((frames, at))
}
