//! `--shard I/N`: N jobs given the same inputs load disjoint shares that together are
//! every input, into one table.

use crate::util::*;

/// Twelve small inputs, one row each, named so their order says nothing of their share.
fn inputs(w: &Workdir) -> Vec<Row> {
    for i in 0..12 {
        w.write(&format!("in/f{i:02}.csv"), format!("id,p\n{i},{}\n", i % 3));
    }
    input_rows(&[w.path("in")])
}

fn loaded(out: &std::process::Output) -> u64 {
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    summary["inputs_loaded"].as_u64().unwrap()
}

#[test]
fn the_shares_of_one_input_list_are_disjoint_and_cover_it() {
    for n in [1, 3, 5] {
        let w = Workdir::new();
        let all = inputs(&w);
        let mut total = 0;
        for i in 0..n {
            let (job, shard) = (format!("s{i}"), format!("{i}/{n}"));
            let out = w.run(&[
                "-t", "t", "-p", "p", "--job", &job, "--shard", &shard, "--json", "in",
            ]);
            assert_code(&out, 0);
            total += loaded(&out);
        }
        assert_eq!(total, 12, "{n} shards");
        assert_same_rows(table_rows(&w.path("t")), all, &format!("{n} shards"));
    }
}

#[test]
fn a_shard_is_the_same_on_every_run_so_a_rerun_loads_nothing() {
    let w = Workdir::new();
    inputs(&w);
    let first = w.run(&["-t", "t", "--shard", "1/4", "--json", "in"]);
    assert_code(&first, 0);
    let again = w.run(&["-t", "t", "--shard", "1/4", "--json", "in"]);
    assert_code(&again, 0);
    assert!(
        stderr(&again).contains("nothing to load"),
        "{}",
        stderr(&again)
    );
    // --dry-run shows the same share: every input of it already loaded.
    let dry = w.run(&["-t", "t", "--shard", "1/4", "--dry-run", "in"]);
    assert_code(&dry, 0);
    let listed = String::from_utf8_lossy(&dry.stdout).to_string();
    assert_eq!(
        listed.lines().filter(|l| l.starts_with("loaded")).count() as u64,
        loaded(&first)
    );
    assert!(!listed.contains("new\t"), "{listed}");
}

#[test]
fn a_shard_outside_its_count_is_a_usage_error() {
    let w = Workdir::new();
    inputs(&w);
    for bad in ["4/4", "0/0", "1", "a/2", "-1/2"] {
        let out = w.run(&["-t", "t", &format!("--shard={bad}"), "in"]);
        assert_code(&out, 2);
        assert!(stderr(&out).contains("--shard"), "{bad}: {}", stderr(&out));
    }
    assert!(!w.path("t").exists());
}
