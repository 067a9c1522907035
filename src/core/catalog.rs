//! An Iceberg table's catalog as `--catalog` names it, and the table's name there.
//!
//! What is journaled with a run and recorded in the table's contract is the catalog's
//! URI without its password: journals and contracts are files anyone who can read the
//! table can read, and `--status` and error messages print the URI. The URI as given,
//! credentials and all, stays in the process that was given it ([`Secret`]); a recovery
//! or an abort in another process takes the password from `PGPASSWORD`, as `psql` does.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// The kinds of catalog `--catalog` can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatalogKind {
    /// `sqlite:///ABS/PATH.db`: the SQL catalog in a SQLite file, one host.
    Sqlite,
    /// `postgresql://USER@HOST:PORT/DB`: the same SQL catalog on a PostgreSQL server.
    Postgres,
    /// `http(s)://HOST[:PORT][/PATH][?warehouse=W]`: an Iceberg REST catalog.
    Rest,
}

impl CatalogKind {
    /// The kind of catalog `uri` names, checked as far as can be without reaching it.
    pub(crate) fn of(uri: &str) -> Result<CatalogKind> {
        if let Some(path) = uri.strip_prefix("sqlite://") {
            if !path.starts_with('/') {
                bail!(
                    "--catalog {uri:?}: the SQLite file's path must be absolute \
                     (sqlite:///ABSOLUTE/PATH.db)"
                );
            }
            return Ok(CatalogKind::Sqlite);
        }
        if uri.starts_with("postgresql://") || uri.starts_with("postgres://") {
            return Ok(CatalogKind::Postgres);
        }
        if uri.starts_with("http://") || uri.starts_with("https://") {
            return Ok(CatalogKind::Rest);
        }
        bail!(
            "--catalog {:?}: expected sqlite:///ABSOLUTE/PATH.db (a SQL catalog in a SQLite \
             file), postgresql://USER@HOST:PORT/DATABASE (on a PostgreSQL server) or \
             https://HOST/PATH (an Iceberg REST catalog)",
            without_password(uri)
        )
    }
}

/// A catalog's URI as given, credentials included: kept by the process it was given to,
/// never written (serde skips it), never printed (its `Debug` does not show it), and not
/// part of what makes two catalogs the same (equal whatever it holds).
#[derive(Clone, Default)]
pub(crate) struct Secret(Option<String>);

impl Secret {
    pub(crate) fn new(text: Option<String>) -> Secret {
        Secret(text)
    }

    #[cfg_attr(not(feature = "iceberg"), allow(dead_code))] // read by the catalogs only
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "<secret>" } else { "None" })
    }
}

impl PartialEq for Secret {
    fn eq(&self, _: &Secret) -> bool {
        true
    }
}

impl Eq for Secret {}

/// An Iceberg table's catalog and the table's name there (`NAMESPACE.NAME`). Journaled
/// with the run and recorded in the table's contract, so that recovery, `--status` and
/// `--abort` reach the same table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CatalogTable {
    /// The catalog's URI without its password.
    pub(crate) catalog: String,
    pub(crate) name: String,
    /// The URI as given, when it carried a password.
    #[serde(skip)]
    pub(crate) given: Secret,
}

impl CatalogTable {
    /// The catalog `uri` names (checked), and the table `name` in it.
    pub(crate) fn new(uri: &str, name: String) -> Result<CatalogTable> {
        CatalogKind::of(uri)?;
        let catalog = without_password(uri);
        let given = Secret::new((catalog != uri).then(|| uri.to_string()));
        Ok(CatalogTable {
            catalog,
            name,
            given,
        })
    }

    /// The URI to connect with: as given if this process was given one with a password.
    #[cfg_attr(not(feature = "iceberg"), allow(dead_code))] // read by the catalogs only
    pub(crate) fn connect_uri(&self) -> &str {
        self.given.get().unwrap_or(&self.catalog)
    }
}

/// `uri` without a password: the `:PASSWORD` of its user information and any
/// `password=` parameter taken out (a URI of several hosts too, `h1:5432,h2:5432`, which
/// URL parsers refuse; the same split the PostgreSQL client makes).
pub(crate) fn without_password(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            format!("{user}@{hosts}")
        }
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|pair| !pair.starts_with("password="))
                .collect();
            if kept.is_empty() {
                path.to_string()
            } else {
                format!("{path}?{}", kept.join("&"))
            }
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_taken_out_of_every_place_a_uri_can_carry_them() {
        for (given, kept) in [
            (
                "postgresql://ingest:s3cret@db:5432/cat",
                "postgresql://ingest@db:5432/cat",
            ),
            (
                "postgres://u:p%40ss@h1:5432,h2:5433/cat?sslmode=disable",
                "postgres://u@h1:5432,h2:5433/cat?sslmode=disable",
            ),
            (
                "postgresql://u@h/cat?password=x&application_name=a",
                "postgresql://u@h/cat?application_name=a",
            ),
            ("postgresql://u@h/cat?password=x", "postgresql://u@h/cat"),
            ("postgresql://u:pw@h", "postgresql://u@h"),
            ("postgresql://h/cat", "postgresql://h/cat"),
            ("sqlite:///data/catalog.db", "sqlite:///data/catalog.db"),
        ] {
            assert_eq!(without_password(given), kept, "{given}");
        }
    }

    #[test]
    fn the_uri_as_given_is_kept_apart_and_never_shown_or_written() {
        let table = CatalogTable::new("postgresql://u:hunter2@h/cat", "default.t".into()).unwrap();
        assert_eq!(table.catalog, "postgresql://u@h/cat");
        assert_eq!(table.connect_uri(), "postgresql://u:hunter2@h/cat");
        let shown = format!("{table:?}");
        let written = serde_json::to_string(&table).unwrap();
        for text in [&shown, &written] {
            assert!(!text.contains("hunter2"), "{text}");
        }
        assert!(shown.contains("given: <secret>"), "{shown}");
        // Read back (recovery): the same catalog, connected to without the password.
        let read: CatalogTable = serde_json::from_str(&written).unwrap();
        assert_eq!(read, table);
        assert_eq!(read.connect_uri(), "postgresql://u@h/cat");
        let plain = CatalogTable::new("sqlite:///d/c.db", "default.t".into()).unwrap();
        assert_eq!(plain.given.get(), None);
    }

    #[test]
    fn catalogs_are_told_apart_by_their_scheme() {
        assert_eq!(
            CatalogKind::of("sqlite:///d/c.db").unwrap(),
            CatalogKind::Sqlite
        );
        assert_eq!(
            CatalogKind::of("postgres://h/c").unwrap(),
            CatalogKind::Postgres
        );
        assert_eq!(
            CatalogKind::of("https://rest.example/api?warehouse=w").unwrap(),
            CatalogKind::Rest
        );
        for (bad, says) in [
            ("sqlite://rel.db", "must be absolute"),
            ("mysql://u:tok@h/db", "expected sqlite:///"),
        ] {
            let e = CatalogKind::of(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
            assert!(!e.contains("tok"), "{e}");
        }
    }
}
