//! The SQL catalog on a PostgreSQL server (`--catalog postgresql://USER@HOST:PORT/DB`):
//! the same tables as in a SQLite file, reached by every host that reaches the server.
//!
//! The password comes from the URI as this process was given it or from `PGPASSWORD`
//! (a recovery or `--abort` in another process, whose journal holds the URI without
//! it), and is never printed: messages name the catalog by the URI without it.
//!
//! `sslmode=require` connects over TLS and verifies the server's certificate against
//! `PGSSLROOTCERT` or the system's CAs; otherwise (`disable`, `prefer`, the default)
//! the connection is plain, for servers on a trusted network.
//!
//! Every session sets `synchronous_commit = on`, whatever the server's default: the
//! reply to a swap then comes only once its commit record is flushed to the server's
//! write-ahead log, and a commit becomes visible to other sessions only after that flush,
//! so what the catalog shows (our own commits, found again after a crash) is durable.
//! Waits are bounded (connecting, locks, statements, a silent network), so a lost server
//! fails the run, never hangs it; a connection lost mid-commit is opened again for the
//! caller's next look at the table, which decides whether the commit landed.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use postgres::config::SslMode;
use postgres::{Client, Config, NoTls};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Catalog, Swap, TableName, CREATE_TABLES};
use crate::core::catalog::CatalogTable;

/// How long connecting, a lock wait, or a silent connection may take before failing.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
const SESSION: &str = "SET synchronous_commit = on;
     SET lock_timeout = '30s';
     SET statement_timeout = '60s';";
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// An arbitrary constant: the advisory lock under which a first writer creates the
/// catalog's tables, so that writers starting at once do not race `CREATE TABLE`.
const CREATE_LOCK: i64 = 0x1ce_be29_ca7a;

/// A SQL catalog on a PostgreSQL server.
pub(crate) struct PgCatalog {
    client: RefCell<Client>,
    /// The last statement failed without an answer from the server: open a new
    /// connection before the next.
    lost: Cell<bool>,
    config: Config,
    /// `sslmode=require`: TLS, the server's certificate verified.
    tls: Option<MakeRustlsConnect>,
    /// The URI without its password, as messages name the catalog.
    shown: String,
    /// The catalog's name: rows of other catalogs in the same database are not ours.
    catalog: String,
}

impl PgCatalog {
    /// Connects to the server `target` names and creates the catalog's tables if the
    /// database has none yet.
    pub(crate) fn open(target: &CatalogTable, catalog: &str) -> Result<PgCatalog> {
        let root = std::env::var_os("PGSSLROOTCERT")
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        PgCatalog::open_with(target, catalog, root)
    }

    /// [`PgCatalog::open`], with `root` as the CA certificates of `sslmode=require`.
    fn open_with(target: &CatalogTable, catalog: &str, root: Option<PathBuf>) -> Result<PgCatalog> {
        let shown = target.catalog.clone();
        let mut config: Config = target
            .connect_uri()
            .parse()
            .with_context(|| format!("--catalog {shown:?} is not a PostgreSQL URI"))?;
        if config.get_password().is_none() {
            if let Some(password) = std::env::var_os("PGPASSWORD") {
                config.password(password.as_encoded_bytes());
            }
        }
        let tls = match config.get_ssl_mode() {
            SslMode::Require => Some(tls(root, &shown)?),
            _ => None,
        };
        config
            .application_name("ingest")
            .connect_timeout(CONNECT_TIMEOUT)
            .keepalives_idle(CONNECT_TIMEOUT)
            .tcp_user_timeout(TCP_USER_TIMEOUT);
        let mut client = connect(&config, tls.as_ref(), &shown)?;
        let present: bool = client
            .query_one(
                "SELECT to_regclass('iceberg_tables') IS NOT NULL
                    AND to_regclass('iceberg_namespace_properties') IS NOT NULL",
                &[],
            )
            .and_then(|row| row.try_get(0))
            .with_context(|| format!("cannot read the PostgreSQL catalog {shown}"))?;
        if !present {
            // One implicit transaction: the lock is held until the tables exist.
            client
                .batch_execute(&format!(
                    "SELECT pg_advisory_xact_lock({CREATE_LOCK}); {CREATE_TABLES}"
                ))
                .with_context(|| {
                    format!("cannot create the catalog's tables in the PostgreSQL catalog {shown}")
                })?;
        }
        Ok(PgCatalog {
            client: RefCell::new(client),
            lost: Cell::new(false),
            config,
            tls,
            shown,
            catalog: catalog.to_string(),
        })
    }

    /// Runs `f` on the connection, opened again first if it was lost. A statement that
    /// only reads (`reads`) is run once more on a new connection if the first one was
    /// lost under it; one that writes never is: whether it landed is for the caller to
    /// find out.
    fn with<T>(
        &self,
        what: &str,
        reads: bool,
        f: impl Fn(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T> {
        let mut client = self.client.borrow_mut();
        let mut result = self.on_connection(&mut client, &f)?;
        if reads && self.lost.get() {
            result = self.on_connection(&mut client, &f)?;
        }
        result.with_context(|| format!("{what} in the PostgreSQL catalog {}", self.shown))
    }

    fn on_connection<T>(
        &self,
        client: &mut Client,
        f: &impl Fn(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<Result<T, postgres::Error>> {
        if self.lost.get() || client.is_closed() {
            *client = connect(&self.config, self.tls.as_ref(), &self.shown)?;
            self.lost.set(false);
        }
        let result = f(client);
        if let Err(e) = &result {
            self.lost.set(is_lost(e) || client.is_closed());
        }
        Ok(result)
    }
}

/// TLS for `sslmode=require`, verifying the server's certificate (as libpq's
/// `verify-full` does) against `root` (`PGSSLROOTCERT`, a PEM file) or else the
/// system's CA certificates: a catalog's swaps decide what a table holds, so a server
/// that cannot prove who it is is not one to commit through.
fn tls(root: Option<PathBuf>, shown: &str) -> Result<MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    match &root {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .with_context(|| {
                    format!(
                        "PGSSLROOTCERT {}: cannot read its certificates",
                        path.display()
                    )
                })?;
            for cert in certs {
                roots.add(cert).with_context(|| {
                    format!(
                        "PGSSLROOTCERT {}: a certificate is not valid",
                        path.display()
                    )
                })?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                // One unusable system certificate does not make the others unusable.
                let _ = roots.add(cert);
            }
        }
    }
    if roots.is_empty() {
        bail!(
            "--catalog {shown:?}: sslmode=require, and no CA certificate to verify the \
             server with (set PGSSLROOTCERT to the CA's PEM file)"
        );
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Whether `e` ended the connection: an error the server did not send (a reset, a
/// timeout), or one that ends the session (`FATAL`: a terminated backend, a shutdown).
fn is_lost(e: &postgres::Error) -> bool {
    e.as_db_error()
        .is_none_or(|db| matches!(db.severity(), "FATAL" | "PANIC"))
}

fn connect(config: &Config, tls: Option<&MakeRustlsConnect>, shown: &str) -> Result<Client> {
    let connected = match tls {
        Some(tls) => config.connect(tls.clone()),
        None => config.connect(NoTls),
    };
    let mut client = connected.with_context(|| {
        let hint = if tls.is_some() {
            " over TLS (the server's certificate verified against the CA certificates of \
             PGSSLROOTCERT, or else the system's)"
        } else if config.get_password().is_none() {
            " with no password (the journal and the table keep the catalog's URI without \
             its password: give it in PGPASSWORD)"
        } else {
            ""
        };
        format!("cannot connect to the PostgreSQL catalog {shown}{hint}")
    })?;
    client
        .batch_execute(SESSION)
        .with_context(|| format!("cannot set up a session of the PostgreSQL catalog {shown}"))?;
    Ok(client)
}

impl Catalog for PgCatalog {
    fn load(&self, table: &TableName) -> Result<Option<String>> {
        let row = self.with("cannot look up the table", true, |client| {
            client.query_opt(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3",
                &[&self.catalog, &table.namespace, &table.name],
            )
        })?;
        match row {
            Some(row) => Ok(row.try_get::<_, Option<String>>(0)?),
            None => Ok(None),
        }
    }

    fn create(&self, table: &TableName, metadata: &str) -> Result<bool> {
        self.with("cannot register the table", false, |client| {
            let mut tx = client.transaction()?;
            let added = tx.execute(
                "INSERT INTO iceberg_tables
                 (catalog_name, table_namespace, table_name, metadata_location,
                  previous_metadata_location, iceberg_type)
                 VALUES ($1, $2, $3, $4, NULL, 'TABLE')
                 ON CONFLICT DO NOTHING",
                &[&self.catalog, &table.namespace, &table.name, &metadata],
            )?;
            // The namespace exists for every reader of the catalog, as pyiceberg records it.
            tx.execute(
                "INSERT INTO iceberg_namespace_properties
                 (catalog_name, namespace, property_key, property_value)
                 VALUES ($1, $2, 'exists', 'true')
                 ON CONFLICT DO NOTHING",
                &[&self.catalog, &table.namespace],
            )?;
            tx.commit()?;
            Ok(added == 1)
        })
    }

    /// Nothing to do: a commit is visible only once flushed (see the module's comment).
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    fn swap(&self, table: &TableName, swap: &Swap<'_>) -> Result<bool> {
        let (expected, new) = (swap.expected, swap.new);
        let changed = self.with("cannot commit", false, |client| {
            client.execute(
                "UPDATE iceberg_tables
                 SET metadata_location = $5, previous_metadata_location = $4
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                   AND metadata_location = $4",
                &[
                    &self.catalog,
                    &table.namespace,
                    &table.name,
                    &expected,
                    &new,
                ],
            )
        })?;
        Ok(changed == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test environment's PostgreSQL server (`.ci/pg-store`), or `None` with the
    /// reason printed.
    fn server() -> Option<String> {
        let uri = std::env::var("INGEST_TEST_PG_URI").ok();
        if uri.is_none() {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no PostgreSQL server under CI; run the tests through .ci/test"
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: no INGEST_TEST_PG_URI (.ci/test starts a PostgreSQL server)"
            );
        }
        uri
    }

    fn catalog(uri: &str, name: &str) -> PgCatalog {
        let target = CatalogTable::new(uri, "default.t".into()).unwrap();
        PgCatalog::open(&target, name).unwrap()
    }

    #[test]
    fn a_swap_lands_only_on_the_metadata_it_was_made_on() {
        let Some(uri) = server() else { return };
        // A table name of this test alone: the server is shared by every test.
        let t = TableName::parse(&format!("unit.swap{}", std::process::id())).unwrap();
        let (a, b) = (catalog(&uri, "ingest"), catalog(&uri, "ingest"));
        let elsewhere = catalog(&uri, "elsewhere");
        super::super::tests::swaps_land_only_on_the_metadata_they_were_made_on(
            &a, &b, &elsewhere, &t,
        );
        // A connection the server drops under a statement: a read is run once more on a
        // new one, a write never (whether it landed is the caller's to find out); either
        // way the next statement has a connection.
        let terminate = "SELECT pg_terminate_backend(pg_backend_pid())";
        for reads in [true, false] {
            let calls = Cell::new(0);
            let result = a.with("", reads, |client| {
                calls.set(calls.get() + 1);
                let sql = if calls.get() == 1 {
                    terminate
                } else {
                    "SELECT 1"
                };
                client.batch_execute(sql)
            });
            assert_eq!(
                (result.is_ok(), calls.get()),
                (reads, 1 + usize::from(reads))
            );
            assert_eq!(a.load(&t).unwrap().as_deref(), Some("m3b"));
        }
        // An error the server never sent (here the client's own, a parameter missing)
        // leaves the connection in doubt: the next statement gets a new one.
        let pid = |catalog: &PgCatalog| -> i32 {
            catalog
                .with("", true, |client| {
                    client
                        .query_one("SELECT pg_backend_pid()", &[])
                        .map(|row| row.get(0))
                })
                .unwrap()
        };
        let before = pid(&a);
        a.with("", false, |client| client.execute("SELECT $1::int", &[]))
            .unwrap_err();
        assert_ne!(pid(&a), before, "the connection in doubt was used again");
        // An error the server answers with leaves the connection as it was.
        let calls = Cell::new(0);
        a.with("", true, |client| {
            calls.set(calls.get() + 1);
            client.batch_execute("SELECT no_such_function()")
        })
        .unwrap_err();
        assert_eq!(calls.get(), 1);
        assert!(!a.lost.get());
    }

    #[test]
    fn sslmode_require_connects_over_tls_to_a_server_its_ca_vouches_for_only() {
        let Some(uri) = server() else { return };
        let ca = std::env::var("INGEST_TEST_PG_CA").expect(".ci/pg-store exports it");
        let target = CatalogTable::new(&format!("{uri}?sslmode=require"), "t.t".into()).unwrap();
        let catalog = PgCatalog::open_with(&target, "ingest", Some(ca.into())).unwrap();
        let ssl: bool = catalog
            .with("", true, |client| {
                client
                    .query_one(
                        "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                        &[],
                    )
                    .map(|row| row.get(0))
            })
            .unwrap();
        assert!(ssl, "connected without TLS");
        // The system's CAs never signed the test server's certificate.
        let err = format!(
            "{:#}",
            PgCatalog::open_with(&target, "ingest", None).err().unwrap()
        );
        assert!(
            err.contains("cannot connect") || err.contains("CA certificate"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            PgCatalog::open_with(&target, "ingest", Some("/nonexistent.pem".into()))
                .err()
                .unwrap()
        );
        assert!(err.contains("PGSSLROOTCERT /nonexistent.pem"), "{err}");
    }

    #[test]
    fn a_wrong_password_or_a_server_that_is_not_there_is_a_clear_error_without_secrets() {
        let Some(uri) = server() else { return };
        // The server's URI names its user (`.ci/pg-store`); the password is wrong.
        let wrong = uri.replacen('@', ":not-hunter2@", 1);
        for (given, expect) in [
            (wrong.as_str(), "cannot connect to the PostgreSQL catalog"),
            (
                "postgresql://u:hunter2@127.0.0.1:1/cat",
                "cannot connect to the PostgreSQL catalog postgresql://u@127.0.0.1:1/cat",
            ),
        ] {
            let target = CatalogTable::new(given, "default.t".into()).unwrap();
            let err = format!("{:#}", PgCatalog::open(&target, "ingest").err().unwrap());
            assert!(err.contains(expect), "{err}");
            assert!(!err.contains("hunter2"), "{err}");
        }
    }
}
