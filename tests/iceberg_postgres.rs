//! Iceberg tables whose catalog is on a PostgreSQL server (`--catalog postgresql://...`):
//! the crash matrix, a lost reply, random kills and four sharded writers of
//! `tests/iceberg.rs`, each through a database of its own on the server `.ci/pg-store`
//! starts (skipped, with the reason printed, without one), and the password of a
//! catalog's URI, which no file and no message may show.

use crate::iceberg::*;
use crate::util::*;

#[test]
fn every_fail_point_then_recover_through_a_postgresql_catalog() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    // The SQLite matrix runs every point; here, the points where the catalog is met.
    every_fail_point_then_recover(&catalog, &catalog_fail_points());
}

#[test]
fn a_lost_reply_from_a_postgresql_catalog_is_never_committed_twice() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    a_lost_reply_is_found_in_the_table(&catalog);
}

#[test]
fn random_sigkill_through_a_postgresql_catalog() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    random_sigkill_through(&catalog, 2);
}

#[test]
fn four_shards_through_a_postgresql_catalog_killed_at_random_leave_an_exact_table() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    four_shards_killed_at_random(&catalog, 2);
}

/// Every file under `dir` (the table, its jobs' journals, the inputs) and `texts`: none
/// holds `secret`.
#[track_caller]
fn assert_nowhere(secret: &str, dir: &std::path::Path, texts: &[&[u8]]) {
    for text in texts {
        assert!(
            !String::from_utf8_lossy(text).contains(secret),
            "the password was printed: {}",
            String::from_utf8_lossy(text)
        );
    }
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{} holds the password",
                entry.path().display()
            );
        }
    }
}

#[test]
fn a_password_in_the_catalog_uri_is_never_written_or_printed_and_recovery_takes_pgpassword() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    let password = std::env::var("PGPASSWORD").unwrap();
    let given = catalog.uri().replacen('@', &format!(":{password}@"), 1);
    let w = Workdir::new();
    w.fixture("orders");
    let load = [
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        &given,
        "-p",
        "country",
        "--checkpoint-rows",
        "100",
        "orders",
    ];
    // Killed after its second snapshot, with the password in the URI alone.
    let out = w
        .cmd()
        .env_remove("PGPASSWORD")
        .env("INGEST_FAIL_POINT", "iceberg.commit.after:2")
        .args(load)
        .output()
        .unwrap();
    assert!(crashed(&out), "{}", stderr(&out));
    let committed = catalog.table("default.t").unwrap().summaries.len();
    assert_eq!(committed, 2);
    let no_password = |args: &[&str]| {
        w.cmd()
            .env_remove("PGPASSWORD")
            .args(args)
            .output()
            .unwrap()
    };
    let status = no_password(&["-t", "t", "--status"]);
    // Recovery in another process has the URI without the password: it says where to
    // give it, and changes nothing.
    let refused = no_password(&["-t", "t", "--recover"]);
    assert_code(&refused, 1);
    assert!(
        stderr(&refused).contains("PGPASSWORD"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(
        catalog.table("default.t").unwrap().summaries.len(),
        committed
    );
    assert_nowhere(
        &password,
        &w.path(""),
        &[
            &out.stdout,
            &out.stderr,
            &status.stdout,
            &status.stderr,
            &refused.stdout,
            &refused.stderr,
        ],
    );
    // With PGPASSWORD, as `psql` takes it, recovery commits the rest once.
    let recovered = w.run(&["-t", "t", "--recover"]);
    assert_code(&recovered, 0);
    let rows = catalog.rows("default.t");
    let want = as_typed_by_contract(&w.path("t"), input_rows(&[w.path("orders")]));
    assert_same_rows(rows, want, "recovered with PGPASSWORD");
    assert_markers_once(&catalog.table("default.t").unwrap(), "recovered");
    assert_nowhere(
        &password,
        &w.path(""),
        &[&recovered.stdout, &recovered.stderr],
    );
}

#[test]
fn a_catalog_server_that_cannot_be_reached_fails_the_load_before_anything_is_written() {
    // No server needed: nothing listens on port 1.
    let w = Workdir::new();
    w.fixture("orders");
    let out = w.run(&[
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        "postgresql://ingest:hunter2@127.0.0.1:1/catalog",
        "-p",
        "country",
        "orders",
    ]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains(
            "cannot connect to the PostgreSQL catalog postgresql://ingest@127.0.0.1:1/catalog"
        ),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!w.path("t/data").exists(), "a data file was written");
    assert_nowhere("hunter2", &w.path(""), &[&out.stdout]);
}

#[test]
fn sslmode_require_loads_over_tls_and_refuses_a_server_no_trusted_ca_vouches_for() {
    let Some(catalog) = TestCatalog::postgres() else {
        return;
    };
    let ca = std::env::var("INGEST_TEST_PG_CA").expect(".ci/pg-store exports it");
    let uri = format!("{}?sslmode=require", catalog.uri());
    let w = Workdir::new();
    w.fixture("orders");
    let load = [
        "-t",
        "t",
        "--table-format",
        "iceberg",
        "--catalog",
        &uri,
        "-p",
        "country",
        "orders",
    ];
    // The system's CAs never signed the test server's certificate (an empty
    // PGSSLROOTCERT is no file: the system's CAs, as when it is unset).
    let refused = w
        .cmd()
        .env("PGSSLROOTCERT", "")
        .args(load)
        .output()
        .unwrap();
    assert_code(&refused, 1);
    assert!(
        stderr(&refused).contains("cannot connect to the PostgreSQL catalog")
            && stderr(&refused).contains("TLS handshake"),
        "{}",
        stderr(&refused)
    );
    assert!(catalog.table("default.t").is_none());
    let out = w
        .cmd()
        .env("PGSSLROOTCERT", &ca)
        .args(load)
        .output()
        .unwrap();
    assert_code(&out, 0);
    let want = as_typed_by_contract(&w.path("t"), input_rows(&[w.path("orders")]));
    assert_same_rows(catalog.rows("default.t"), want, "over TLS");
}
