//! Hive partition paths: `COL=VALUE` directory names, escaped the way Hive and Spark
//! escape path names (`FileUtils.escapePathName`), so every engine reads the value back.
//!
//! Because every component is `COL=VALUE` with `/` escaped, no value can form `.`, `..`
//! or a separator: a partition path can never leave the table directory.

use anyhow::{bail, Result};

/// The directory name for a null or empty value, as in Hive.
pub(crate) const DEFAULT_PARTITION: &str = "__HIVE_DEFAULT_PARTITION__";

/// Longest directory name most Linux filesystems accept.
const NAME_MAX: usize = 255;

/// Bytes Hive escapes, plus NUL, which no file name may hold.
fn needs_escape(b: u8) -> bool {
    matches!(
        b,
        0x00..=0x1F
            | 0x7F
            | b'"'
            | b'#'
            | b'%'
            | b'\''
            | b'*'
            | b'/'
            | b':'
            | b'='
            | b'?'
            | b'\\'
            | b'{'
            | b'['
            | b']'
            | b'^'
    )
}

/// Escapes one name or value as Hive does: upper-case `%XX` for the bytes above.
pub(crate) fn escape(raw: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    // Inputs are checked to be UTF-8 and only ASCII bytes are escaped, so the unescaped
    // runs between escapes are whole UTF-8 sequences.
    let mut run = 0;
    for (i, &b) in raw.iter().enumerate() {
        if needs_escape(b) {
            out.push_str(&String::from_utf8_lossy(&raw[run..i]));
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 15) as usize] as char);
            run = i + 1;
        }
    }
    out.push_str(&String::from_utf8_lossy(&raw[run..]));
}

/// The directory name `COL=VALUE` for one partition column.
pub(crate) fn component(column: &str, value: &[u8], out: &mut String) -> Result<()> {
    let start = out.len();
    escape(column.as_bytes(), out);
    out.push('=');
    if value.is_empty() {
        out.push_str(DEFAULT_PARTITION);
    } else if value == DEFAULT_PARTITION.as_bytes() {
        // A literal sentinel would read back as null: escape its first byte.
        out.push_str("%5F");
        escape(&value[1..], out);
    } else {
        escape(value, out);
    }
    if out.len() - start > NAME_MAX {
        bail!(
            "partition value for column {column:?} is too long for a directory name \
             ({} bytes escaped, at most {NAME_MAX})",
            out.len() - start
        );
    }
    Ok(())
}

/// The partition values of the table file at `dest` (`a=1/b=x%2Fy/part-….parquet`), in
/// the order of `partition_by`: each directory's value unescaped, the default partition
/// as `None`.
#[cfg(any(feature = "delta", feature = "iceberg"))]
pub(crate) fn values_of(dest: &str, partition_by: &[String]) -> Result<Vec<Option<String>>> {
    let dirs: Vec<&str> = dest.split('/').collect();
    let dirs = &dirs[..dirs.len().saturating_sub(1)];
    if dirs.len() != partition_by.len() {
        bail!(
            "{dest} is not a file of a table partitioned by [{}]",
            partition_by.join(", ")
        );
    }
    let mut values = Vec::with_capacity(dirs.len());
    for (dir, column) in dirs.iter().zip(partition_by) {
        let Some((name, value)) = dir.split_once('=') else {
            bail!("{dest}: {dir:?} is not a COL=VALUE directory");
        };
        if String::from_utf8_lossy(&unescape(name)) != column.as_str() {
            bail!("{dest}: {dir:?} is not a directory of partition column {column:?}");
        }
        values.push(if value == DEFAULT_PARTITION {
            None
        } else {
            Some(
                String::from_utf8(unescape(value))
                    .map_err(|_| anyhow::anyhow!("{dest}: the value of {column:?} is not UTF-8"))?,
            )
        });
    }
    Ok(values)
}

/// Reverses `escape` (and maps the default partition back to empty), for readers and tests.
#[cfg(any(test, feature = "delta", feature = "iceberg"))]
pub(crate) fn unescape(name: &str) -> Vec<u8> {
    if name == DEFAULT_PARTITION {
        return Vec::new();
    }
    let bytes = name.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(hi), Some(lo)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push(hi << 4 | lo);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dir(col: &str, value: &[u8]) -> String {
        let mut s = String::new();
        component(col, value, &mut s).unwrap();
        s
    }

    #[test]
    fn escapes_like_hive() {
        assert_eq!(dir("dt", b"2026-11-28"), "dt=2026-11-28");
        assert_eq!(dir("p", b"a/b"), "p=a%2Fb");
        assert_eq!(dir("p", b"../../etc"), "p=..%2F..%2Fetc");
        assert_eq!(dir("p", b"x=1:2%"), "p=x%3D1%3A2%25");
        assert_eq!(dir("p", b"tab\there\x7f"), "p=tab%09here%7F");
        assert_eq!(dir("p", "Zürich 北京".as_bytes()), "p=Zürich 北京");
        assert_eq!(dir("p", b""), "p=__HIVE_DEFAULT_PARTITION__");
        assert_eq!(
            dir("p", b"__HIVE_DEFAULT_PARTITION__"),
            "p=%5F_HIVE_DEFAULT_PARTITION__"
        );
        assert_eq!(dir("a=b", b"."), "a%3Db=.");
    }

    #[test]
    fn over_long_values_are_refused_not_truncated() {
        let mut s = String::new();
        assert!(component("p", &[b'x'; 300], &mut s).is_err());
    }

    proptest! {
        #[test]
        fn escaping_round_trips_and_never_leaves_the_directory(value in "\\PC{0,40}") {
            let name = dir("p", value.as_bytes());
            prop_assert!(!name.contains('/'));
            prop_assert!(!name.contains('\0'));
            prop_assert!(name != "." && name != "..");
            let escaped = &name["p=".len()..];
            prop_assert_eq!(unescape(escaped), value.as_bytes().to_vec());
        }

        #[test]
        fn arbitrary_bytes_round_trip(value in proptest::collection::vec(any::<u8>(), 0..40)) {
            let value = String::from_utf8_lossy(&value).into_owned();
            let name = dir("p", value.as_bytes());
            prop_assert_eq!(unescape(&name["p=".len()..]), value.as_bytes().to_vec());
        }
    }
}
