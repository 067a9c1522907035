//! Which of the files below an input directory (or objects below an input prefix) are
//! inputs: never a hidden one, and only those `--include` / `--exclude` choose.
//!
//! One rule for both: a path below the directory or prefix with a component that starts
//! with `.` or `_` is never an input (`.git/`, `.part` files of a copy in flight,
//! `_SUCCESS` markers, Spark's `_temporary/`), as Hive, Spark and DuckDB skip them. A
//! file or object named on the command line itself is taken as named.
//!
//! Patterns are globs (ripgrep's `globset`): `*` does not cross a `/`, `**` does. A
//! pattern without a `/` matches the name at any depth (`*.csv`, as ripgrep's `-g` and
//! rsync take it); one with a `/` matches the whole path below the directory or prefix
//! (`2026-*/orders_*.csv`, `**/raw/*.csv`). An input must match some `--include`, if any
//! is given, and no `--exclude`.

use anyhow::Result;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use crate::core::error::UsageError;

/// The `--include` and `--exclude` patterns, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct Selection {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

impl Selection {
    /// Compiles the patterns; a malformed one is a usage error naming it.
    pub(crate) fn new(include: &[String], exclude: &[String]) -> Result<Selection> {
        Ok(Selection {
            include: compile("--include", include)?,
            exclude: compile("--exclude", exclude)?,
        })
    }

    /// Whether the file at `rel`, a `/`-separated path below an input directory or
    /// prefix, is an input.
    pub(crate) fn takes(&self, rel: &str) -> bool {
        !is_hidden_path(rel)
            && self.include.as_ref().is_none_or(|set| set.is_match(rel))
            && !self.exclude.as_ref().is_some_and(|set| set.is_match(rel))
    }
}

/// Whether a name is hidden from a walk or a listing: it starts with `.` or `_`.
pub(crate) fn is_hidden(name: &str) -> bool {
    name.starts_with(['.', '_'])
}

/// Whether any component of a `/`-separated relative path is hidden.
pub(crate) fn is_hidden_path(rel: &str) -> bool {
    rel.split('/').any(is_hidden)
}

fn compile(flag: &str, patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut set = GlobSetBuilder::new();
    for pattern in patterns {
        let anchored = match pattern.trim_start_matches("./") {
            p if p.contains('/') => p.trim_start_matches('/').to_string(),
            p => format!("**/{p}"),
        };
        let glob = GlobBuilder::new(&anchored)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| {
                anyhow::Error::new(UsageError(format!("{flag} {pattern:?} is not a glob: {e}")))
            })?;
        set.add(glob);
    }
    let set = set
        .build()
        .map_err(|e| anyhow::Error::new(UsageError(format!("{flag}: {e}"))))?;
    Ok(Some(set))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(include: &[&str], exclude: &[&str]) -> Selection {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        Selection::new(&own(include), &own(exclude)).unwrap()
    }

    #[test]
    fn hidden_components_are_never_inputs() {
        let all = Selection::default();
        for rel in [
            "_SUCCESS",
            ".x.csv",
            "_temporary/0/part.csv",
            "a/.git/x",
            "a/_b/c.csv",
        ] {
            assert!(!all.takes(rel), "{rel}");
        }
        for rel in ["a.csv", "sub/b_c.csv", "x/y.z_/d.csv"] {
            assert!(all.takes(rel), "{rel}");
        }
    }

    #[test]
    fn a_pattern_without_a_slash_matches_the_name_at_any_depth() {
        let s = sel(&["*.csv"], &[]);
        assert!(s.takes("a.csv"));
        assert!(s.takes("2026/11/a.csv"));
        assert!(!s.takes("a.json"));
        assert!(!s.takes("a.csv.gz"));
    }

    #[test]
    fn a_pattern_with_a_slash_matches_the_whole_path_and_star_stays_in_one_component() {
        let s = sel(&["2026-*/*.csv"], &[]);
        assert!(s.takes("2026-11/a.csv"));
        assert!(!s.takes("2026-11/deep/a.csv"));
        assert!(!s.takes("x/2026-11/a.csv"));
        let deep = sel(&["**/raw/*.csv"], &[]);
        assert!(deep.takes("raw/a.csv"));
        assert!(deep.takes("x/y/raw/a.csv"));
        let anchored = sel(&["/top/*.csv", "./here/*.csv"], &[]);
        assert!(anchored.takes("top/a.csv"));
        assert!(anchored.takes("here/a.csv"));
    }

    #[test]
    fn exclude_wins_over_include() {
        let s = sel(&["*.csv"], &["*_draft.csv", "tmp/**"]);
        assert!(s.takes("a.csv"));
        assert!(!s.takes("a_draft.csv"));
        assert!(!s.takes("tmp/x/a.csv"));
        let only_exclude = sel(&[], &["manifest.json"]);
        assert!(only_exclude.takes("a.csv"));
        assert!(!only_exclude.takes("d/manifest.json"));
    }

    #[test]
    fn a_malformed_pattern_is_a_usage_error_naming_it() {
        let err = Selection::new(&["a[".to_string()], &[]).unwrap_err();
        assert!(err.downcast_ref::<UsageError>().is_some());
        assert!(err.to_string().contains("--include \"a[\""), "{err}");
    }
}
