//! Nothing outside the table, not even through a symlink (issue 13.10): a link planted
//! inside the table, or inside `_ingest/`, is refused with an error that names it, and
//! nothing is written (or removed) where it points.

use std::os::unix::fs::symlink;

use crate::util::*;

#[test]
fn a_symlinked_partition_is_refused_and_nothing_lands_where_it_points() {
    let w = Workdir::new();
    w.fixture("orders");
    std::fs::create_dir_all(w.path("elsewhere")).unwrap();
    std::fs::create_dir_all(w.path("t")).unwrap();
    symlink(w.path("elsewhere"), w.path("t/dt=2026-11-26")).unwrap();
    let out = w.run(&["-t", "t", "-p", "dt", "orders"]);
    assert_code(&out, 1);
    let err = stderr(&out);
    assert!(
        err.contains("refusing to follow the symbolic link") && err.contains("t/dt=2026-11-26"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_dir(w.path("elsewhere")).unwrap().count(),
        0,
        "a file was written through the link"
    );
    // Once the link is gone, the interrupted run finishes.
    std::fs::remove_file(w.path("t/dt=2026-11-26")).unwrap();
    assert_code(&w.run(&["-t", "t", "--recover"]), 0);
    assert_same_rows(
        table_rows(&w.path("t")),
        input_rows(&[w.path("orders")]),
        "after",
    );
}

#[test]
fn symlinks_inside_ingest_state_are_refused_before_anything_is_written() {
    for planted in [
        "t/_ingest",
        "t/_ingest/default",
        "t/_ingest/default/lock",
        "t/_ingest/default/journal",
        "t/_ingest/default/pending",
        "t/_rejects/default",
    ] {
        let w = Workdir::new();
        w.fixture("orders");
        let victim = w.write("victim/keep.txt", "precious\n");
        let parent = w.path(planted).parent().unwrap().to_path_buf();
        std::fs::create_dir_all(&parent).unwrap();
        let target = if planted.ends_with("lock") || planted.ends_with("journal") {
            victim.clone()
        } else {
            w.path("victim")
        };
        symlink(&target, w.path(planted)).unwrap();
        let out = w.run(&["-t", "t", "--max-errors", "5", "orders"]);
        assert_code(&out, 1);
        assert!(
            stderr(&out).contains("refusing to follow the symbolic link"),
            "{planted}: {}",
            stderr(&out)
        );
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "precious\n",
            "{planted}"
        );
        assert_eq!(
            std::fs::read_dir(w.path("victim")).unwrap().count(),
            1,
            "{planted}"
        );
    }
}

#[test]
fn an_abort_never_removes_through_a_symlink() {
    let w = Workdir::new();
    w.fixture("orders");
    let load = ["-t", "t", "-p", "dt", "--checkpoint-rows", "100", "orders"];
    assert!(crashed(
        &w.run_failing("checkpoint.committed.after:3", &load)
    ));
    // Swap a published partition for a link to a copy elsewhere.
    let partition = std::fs::read_dir(w.path("t"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("dt="))
        .unwrap();
    let copy = w.path("copy");
    std::fs::rename(&partition, &copy).unwrap();
    symlink(&copy, &partition).unwrap();
    let before = std::fs::read_dir(&copy).unwrap().count();
    let out = w.run(&["-t", "t", "--abort"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("refusing to follow the symbolic link"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(&copy).unwrap().count(), before);
}
