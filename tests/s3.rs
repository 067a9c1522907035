//! Object-store inputs against a real S3 implementation on 127.0.0.1 (SeaweedFS, started
//! by `.ci/test`; see `.ci/s3-store`). Without one, each test says it is skipped, except
//! under CI, where a missing store is a failure.
//!
//! The tests put and inspect objects with their own client (`object_store`, driven here
//! directly), never through `ingest`.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};

use crate::util::*;

/// The table lease of every `ingest` a test runs on a "machine" ([`Store::on`]): a
/// killed holder's lease keeps the next taker waiting up to this long.
pub const LEASE_SECS: u64 = 1;

/// The store `.ci/s3-store` started, and a key prefix no other test uses.
pub struct Store {
    endpoint: String,
    bucket: String,
    key_id: String,
    secret: String,
    prefix: String,
    client: AmazonS3,
    rt: tokio::runtime::Runtime,
    /// `ICEBERG_CREDENTIAL` of every command, for a store whose tables are in a REST
    /// catalog.
    catalog_credential: Option<String>,
}

/// The test store, or `None` (with the reason printed) when none was started.
pub fn store(test: &str) -> Option<Store> {
    store_in(test, "INGEST_TEST_S3_BUCKET")
}

/// The test store's table bucket, the warehouse of its Iceberg REST catalog (a table of
/// that catalog lives there and nowhere else); `None` as for [`store`].
#[cfg(feature = "iceberg")]
pub fn table_bucket(test: &str) -> Option<Store> {
    let mut store = store_in(test, "INGEST_TEST_ICEBERG_BUCKET")?;
    // OAuth2 client credentials of SeaweedFS's catalog: the store's own key.
    store.catalog_credential = Some(format!("{}:{}", store.key_id, store.secret));
    Some(store)
}

/// A store on the bucket the environment variable `bucket_var` names.
fn store_in(test: &str, bucket_var: &str) -> Option<Store> {
    let Ok(endpoint) = std::env::var("INGEST_TEST_S3_ENDPOINT") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: no S3 store under CI; run the tests through .ci/test"
        );
        // Straight to the terminal: the test harness would swallow an eprintln! of a
        // passing test, and a skip must be seen.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped s3::{test}: no S3 store (INGEST_TEST_S3_ENDPOINT is unset; .ci/test starts one)"
        );
        return None;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is unset"));
    let (bucket, key_id, secret) = (
        var(bucket_var),
        var("INGEST_TEST_S3_KEY_ID"),
        var("INGEST_TEST_S3_SECRET"),
    );
    let client = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_bucket_name(&bucket)
        .with_access_key_id(&key_id)
        .with_secret_access_key(&secret)
        .build()
        .unwrap();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let prefix = format!(
        "{test}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = Store {
        endpoint,
        bucket,
        key_id,
        secret,
        prefix,
        client,
        rt,
        catalog_credential: None,
    };
    store.wait_for_bucket();
    Some(store)
}

impl Store {
    /// The bucket is made by the store's start-up, which may still be under way.
    fn wait_for_bucket(&self) {
        // Where a table bucket takes an object: in an underscore directory of a table's
        // place (NAMESPACE/TABLE/), not a dot file.
        let probe = ObjectPath::from(format!("{}/probe/_probe/probe", self.prefix));
        for _ in 0..60 {
            let put = self
                .rt
                .block_on(self.client.put(&probe, PutPayload::from_static(b"x")));
            if put.is_ok() {
                self.rt.block_on(self.client.delete(&probe)).unwrap();
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        panic!("bucket {} never became writable", self.bucket);
    }

    /// `s3://BUCKET/PREFIX/rel`.
    pub fn url(&self, rel: &str) -> String {
        format!("s3://{}/{}/{rel}", self.bucket, self.prefix)
    }

    pub fn put(&self, rel: &str, bytes: impl Into<Vec<u8>>) {
        let key = ObjectPath::from(format!("{}/{rel}", self.prefix));
        let payload = PutPayload::from(bytes.into());
        self.rt.block_on(self.client.put(&key, payload)).unwrap();
    }

    /// Uploads every file of a local directory under `rel/`.
    pub fn put_dir(&self, dir: &std::path::Path, rel: &str) {
        for file in walk(dir) {
            let name = file.strip_prefix(dir).unwrap().to_str().unwrap();
            self.put(&format!("{rel}/{name}"), std::fs::read(&file).unwrap());
        }
    }

    /// Points `cmd` at the store through the standard AWS variables, and nothing else
    /// of the caller's AWS configuration.
    pub fn env<'c>(&self, cmd: &'c mut Command) -> &'c mut Command {
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(key);
            }
        }
        cmd.env_remove("ICEBERG_TOKEN")
            .env_remove("ICEBERG_CREDENTIAL");
        if let Some(credential) = &self.catalog_credential {
            cmd.env("ICEBERG_CREDENTIAL", credential);
        }
        cmd.env("AWS_ENDPOINT_URL", &self.endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", &self.key_id)
            .env("AWS_SECRET_ACCESS_KEY", &self.secret)
    }

    pub fn run(&self, w: &Workdir, args: &[&str]) -> Output {
        self.env(&mut w.cmd()).args(args).output().unwrap()
    }

    /// `ingest` on "machine" `machine`: its own working copy for tables in the bucket
    /// (`INGEST_WORK_DIR`), a lease short enough for a test to outlive a crashed holder
    /// ([`LEASE_SECS`]).
    pub fn on(&self, w: &Workdir, machine: &str) -> Command {
        let mut cmd = w.cmd();
        self.env(&mut cmd)
            .env("INGEST_WORK_DIR", w.path(machine))
            .env("INGEST_LEASE_SECS", LEASE_SECS.to_string());
        cmd
    }

    /// Runs `ingest args` on "machine" `machine` (see [`Store::on`]).
    pub fn run_on(&self, w: &Workdir, machine: &str, args: &[&str]) -> Output {
        self.on(w, machine).args(args).output().unwrap()
    }

    /// The table's URL, `s3://BUCKET/PREFIX/rel`, without a trailing slash.
    pub fn table(&self, rel: &str) -> String {
        self.url(rel)
    }

    fn key(&self, rel: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{rel}", self.prefix))
    }

    /// Every object under `rel` as (key relative to the test's prefix, size), sorted.
    pub fn list(&self, rel: &str) -> Vec<(String, u64)> {
        use futures::StreamExt;
        let prefix = self.key(rel);
        let metas: Vec<_> = self.rt.block_on(async {
            let mut stream = object_store::ObjectStore::list(&self.client, Some(&prefix));
            let mut out = Vec::new();
            while let Some(meta) = stream.next().await {
                out.push(meta.unwrap());
            }
            out
        });
        let skip = self.prefix.len() + 1;
        let mut out: Vec<(String, u64)> = metas
            .into_iter()
            .map(|m| (m.location.as_ref()[skip..].to_string(), m.size))
            .collect();
        out.sort();
        out
    }

    /// Copies every object under `from/` to the same place under `to/`, in the store (a
    /// table copied whole: a crash matrix starts each case from one load).
    #[cfg(feature = "delta")]
    pub fn copy_dir(&self, from: &str, to: &str) {
        for (key, _) in self.list(from) {
            let below = key.strip_prefix(from).unwrap();
            let (src, dst) = (self.key(&key), self.key(&format!("{to}{below}")));
            self.rt.block_on(self.client.copy(&src, &dst)).unwrap();
        }
    }

    pub fn delete(&self, rel: &str) {
        self.rt
            .block_on(self.client.delete(&self.key(rel)))
            .unwrap();
    }

    /// The object at `rel`, if there is one.
    pub fn get(&self, rel: &str) -> Option<Vec<u8>> {
        match self.rt.block_on(self.client.get(&self.key(rel))) {
            Ok(got) => Some(self.rt.block_on(got.bytes()).unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("cannot read {rel}: {e}"),
        }
    }

    /// Copies every object under `rel` into `dir`, as a reader downloading the table.
    pub fn download(&self, rel: &str, dir: &std::path::Path) {
        for (key, _) in self.list(rel) {
            let below = key.strip_prefix(rel).unwrap().trim_start_matches('/');
            let path = dir.join(below);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, self.get(&key).unwrap()).unwrap();
        }
    }

    /// `tests/py/s3_check.py` with `args` (boto3, pyarrow: another client than ingest's),
    /// or `None` without the Python `.ci/s3-store` installs (then the check is skipped,
    /// except under CI).
    pub fn check(&self, args: &[&str]) -> Option<String> {
        let Ok(python) = std::env::var("INGEST_TEST_S3_PYTHON") else {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no INGEST_TEST_S3_PYTHON under CI"
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped the {:?} check: no INGEST_TEST_S3_PYTHON (.ci/test sets it)",
                args.first()
            );
            return None;
        };
        let out = Command::new(python)
            .env("INGEST_TEST_S3_BUCKET", &self.bucket)
            .arg(fixtures().parent().unwrap().join("tests/py/s3_check.py"))
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "s3_check.py {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap())
    }

    /// The store's key id and secret, for checks that they leak nowhere.
    pub fn credentials(&self) -> [&str; 2] {
        [&self.key_id, &self.secret]
    }

    /// The test's key prefix inside the bucket.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn run_failing(&self, w: &Workdir, point: &str, args: &[&str]) -> Output {
        self.env(&mut w.cmd())
            .env("INGEST_FAIL_POINT", point)
            .args(args)
            .output()
            .unwrap()
    }
}

/// Every file under the table's `_ingest/` (journal, manifest, snapshots) as text.
fn state_text(w: &Workdir) -> String {
    walk(&w.path("t/_ingest"))
        .iter()
        .map(|f| String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned())
        .collect()
}

#[test]
fn objects_under_a_prefix_load_once_in_key_order_skipping_hidden_names() {
    let Some(s3) = store("prefix-load") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    s3.put_dir(&orders, "landing");
    s3.put("landing/_SUCCESS", "");
    s3.put("landing/.spark-staging/part-0.csv", "id\nnot-a-row\n");
    s3.put("landing/_temporary/0/part-1.csv", "id\nnot-a-row\n");
    let prefix = s3.url("landing/");

    let dry = s3.run(&w, &["-t", "t", "--dry-run", &prefix]);
    assert_code(&dry, 0);
    let listed: Vec<String> = String::from_utf8_lossy(&dry.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("new\t"))
        .map(|l| l.split('\t').next().unwrap().to_string())
        .collect();
    assert_eq!(
        listed,
        ["2026-11-26.csv", "2026-11-27.csv", "2026-11-28.csv.gz"]
            .map(|n| s3.url(&format!("landing/{n}"))),
        "dry run of {prefix}"
    );

    let out = s3.run(&w, &["-t", "t", "-p", "dt,country", &prefix]);
    assert_code(&out, 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[orders]),
        "load from S3",
    );
    assert!(
        stderr(&out).contains("loaded 912 rows (912 read, 0 dropped, 0 rejected) from 3 input(s)"),
        "{}",
        stderr(&out)
    );

    // The same prefix again loads nothing; a new object under it is all the next run reads.
    let again = s3.run(&w, &["-t", "t", "-p", "dt,country", &prefix, "--json"]);
    assert_code(&again, 0);
    let json: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(json["outcome"], "nothing-to-load", "{json}");
    s3.put(
        "landing/2026-11-29.csv",
        "order_id,dt,ts,customer,email,country,amount,currency,note\n\
         9001,2026-11-29,2026-11-29T08:00:00Z,Ana,ana@example.com,FR,1.50,EUR,\n",
    );
    let more = s3.run(&w, &["-t", "t", "-p", "dt,country", &prefix, "--json"]);
    assert_code(&more, 0);
    let json: serde_json::Value = serde_json::from_slice(&more.stdout).unwrap();
    assert_eq!(json["rows_written"], 1, "{json}");
    assert_eq!(table_rows(&w.path("t")).len(), 913);
}

#[test]
fn a_single_object_and_a_replaced_one_behave_as_files_do() {
    let Some(s3) = store("one-object") else {
        return;
    };
    let w = Workdir::new();
    s3.put("in/a.csv", "id\n1\n");
    let url = s3.url("in/a.csv");
    assert_code(&s3.run(&w, &["-t", "t", &url]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 1);

    // Replaced under the same key: refused until --reload, as a changed file is.
    s3.put("in/a.csv", "id\n1\n2\n");
    let out = s3.run(&w, &["-t", "t", &url]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("changed since run") && stderr(&out).contains("--reload"),
        "{}",
        stderr(&out)
    );
    assert_code(&s3.run(&w, &["-t", "t", &url, "--reload"]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 3);
}

#[test]
fn a_load_from_objects_killed_at_every_checkpoint_point_recovers_exactly_once() {
    let Some(s3) = store("crash") else {
        return;
    };
    let fixtures = Workdir::new();
    let orders = fixtures.fixture("orders");
    s3.put_dir(&orders, "orders");
    let prefix = s3.url("orders");
    let expected = input_rows(&[orders]);
    let args = ["-t", "t", "-p", "dt", "--checkpoint-rows", "100", &prefix];
    for point in [
        "source.barrier:3",
        "checkpoint.complete.after:4",
        "commit.mid:6",
        "run.finished.after:1",
    ] {
        let w = Workdir::new();
        let out = s3.run_failing(&w, point, &args);
        assert!(crashed(&out), "{point}: did not crash: {}", stderr(&out));
        let recovered = s3.run(&w, &["-t", "t", "--recover"]);
        assert_code(&recovered, 0);
        assert_same_rows(
            table_rows(&w.path("t")),
            expected.clone(),
            &format!("recovered after {point}"),
        );
        assert!(visible_debris(&w.path("t")).is_empty(), "{point}");
        let again = s3.run(&w, &args);
        assert_code(&again, 0);
        assert_eq!(table_rows(&w.path("t")).len(), expected.len(), "{point}");
    }
}

/// A resume inside a large object fetches it again from the last 4 MiB block boundary
/// before the position (a ranged GET), not from its first byte, and still loads every
/// row exactly once: quoted fields with commas and newlines are cut nowhere.
#[test]
fn a_resume_inside_a_large_object_reads_it_again_only_from_a_block_boundary() {
    let Some(s3) = store("ranged") else {
        return;
    };
    let w = Workdir::new();
    let mut text = String::from("id,dt,amount,note\n");
    for i in 0..100_000u32 {
        let note = if i % 7 == 0 {
            format!("\"row {i}, \"\"quoted\"\"\nover two lines\"")
        } else {
            format!("plain note for row {i} padded to a realistic width with some words to spare...........")
        };
        text.push_str(&format!(
            "{i},2026-11-{:02},{}.{:02},{note}\n",
            1 + i % 28,
            i % 500,
            i % 100
        ));
    }
    assert!(
        text.len() > 9 << 20,
        "{} bytes: too few for two blocks",
        text.len()
    );
    let local = w.path("big");
    std::fs::create_dir_all(&local).unwrap();
    std::fs::write(local.join("big.csv"), &text).unwrap();
    s3.put("big/big.csv", text.clone());
    let url = s3.url("big/big.csv");
    // Four checkpoints of 15,000 rows: the fifth is cut off about 6 MB into the object.
    let args = ["-t", "t", "-p", "dt", "--checkpoint-rows", "15000", &url];
    let out = s3.run_failing(&w, "checkpoint.complete.after:4", &args);
    assert!(crashed(&out), "did not crash: {}", stderr(&out));
    let recovered = s3.run(&w, &["-t", "t", "--recover"]);
    assert_code(&recovered, 0);
    assert!(
        stderr(&recovered).contains(&format!("of {url} (read again from byte {})", 4 << 20)),
        "{}",
        stderr(&recovered)
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[local]),
        "after a ranged resume",
    );
    let again = s3.run(&w, &args);
    assert_code(&again, 0);
    assert_eq!(table_rows(&w.path("t")).len(), 100_000);
}

#[test]
fn an_object_replaced_before_recover_is_refused_and_nothing_loads_twice() {
    let Some(s3) = store("replaced") else {
        return;
    };
    let w = Workdir::new();
    let orders = w.fixture("orders");
    s3.put_dir(&orders, "orders");
    let prefix = s3.url("orders");
    let args = ["-t", "t", "-p", "dt", "--checkpoint-rows", "100", &prefix];
    assert!(crashed(&s3.run_failing(
        &w,
        "checkpoint.complete.after:4",
        &args
    )));
    let second = std::fs::read_to_string(orders.join("2026-11-27.csv")).unwrap();
    s3.put(
        "orders/2026-11-27.csv",
        second.replacen("1300,", "9999,", 1),
    );
    let out = s3.run(&w, &["-t", "t", "--recover"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("orders/2026-11-27.csv changed since the interrupted run"),
        "{}",
        stderr(&out)
    );
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[orders])[..400].to_vec(),
        "after refused recovery",
    );
}

#[test]
fn credentials_never_reach_messages_state_or_json() {
    let Some(s3) = store("secrets") else {
        return;
    };
    let w = Workdir::new();
    s3.put("in/a.csv", "id\n1\n");
    let url = s3.url("in/a.csv");

    // A wrong secret: the store refuses, and the message does not repeat the secret.
    let fake = "FAKE-secret-5e1f0c7a";
    let out = s3
        .env(&mut w.cmd())
        .env("AWS_SECRET_ACCESS_KEY", fake)
        .args(["-t", "t", "--json", &url])
        .output()
        .unwrap();
    assert_code(&out, 1);
    let said = format!("{}{}", stderr(&out), String::from_utf8_lossy(&out.stdout));
    assert!(said.contains(&url), "the failure names the input: {said}");
    assert!(!said.contains(fake), "the secret leaked: {said}");

    // A good load: the real secret is nowhere in what ingest prints or keeps.
    let out = s3.run(&w, &["-t", "t", "--json", &url]);
    assert_code(&out, 0);
    let status = s3.run(&w, &["-t", "t", "--status", "--json"]);
    for text in [
        stderr(&out),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&status.stdout).into_owned(),
        state_text(&w),
    ] {
        assert!(!text.contains(&s3.secret), "the secret leaked: {text}");
        assert!(!text.contains(&s3.key_id), "the key id leaked: {text}");
    }

    // Credentials in the URL: refused (usage error) without being echoed.
    let embedded = format!("s3://AKIDEXAMPLE:{fake}@{}/x.csv", s3.bucket);
    let out = s3.run(&w, &["-t", "t2", &embedded]);
    assert_code(&out, 2);
    assert!(
        stderr(&out).contains("must not carry credentials"),
        "{}",
        stderr(&out)
    );
    assert!(!stderr(&out).contains(fake) && !stderr(&out).contains("AKIDEXAMPLE"));
    assert!(!w.path("t2").exists());
}

#[test]
fn a_missing_object_or_an_empty_prefix_is_a_clear_error() {
    let Some(s3) = store("missing") else {
        return;
    };
    let w = Workdir::new();
    for url in [s3.url("nothing-here.csv"), s3.url("empty-prefix/")] {
        let out = s3.run(&w, &["-t", "t", &url]);
        assert_code(&out, 1);
        assert!(
            stderr(&out).contains(&format!("input {url} cannot be read")),
            "{}",
            stderr(&out)
        );
        assert!(!w.path("t/_ingest/default/journal").exists());
    }
}
