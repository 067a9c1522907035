//! Duplicates users do not see coming (issue 13.6): the manifest is keyed by path, so a
//! loaded input copied or renamed would load again; its content gives it away.

use crate::util::*;

#[test]
fn a_copied_or_renamed_input_is_refused_naming_the_original() {
    let w = Workdir::new();
    w.fixture("orders");
    assert_code(&w.run(&["-q", "-t", "t", "orders"]), 0);
    let rows = table_rows(&w.path("t")).len();
    std::fs::create_dir_all(w.path("incoming")).unwrap();
    std::fs::copy(
        w.path("orders/2026-11-26.csv"),
        w.path("incoming/orders-copy.csv"),
    )
    .unwrap();
    std::fs::rename(
        w.path("orders/2026-11-27.csv"),
        w.path("incoming/renamed.csv"),
    )
    .unwrap();
    for name in ["orders-copy.csv", "renamed.csv"] {
        let path = format!("incoming/{name}");
        let out = w.run(&["-t", "t", &path]);
        assert_code(&out, 1);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("input {}", w.path(&path).display()))
                && err.contains("has the same content as")
                && err.contains("loaded by run")
                && err.contains("--reload"),
            "{err}"
        );
        assert_eq!(table_rows(&w.path("t")).len(), rows);
    }
    let dry = w.run(&["-t", "t", "--dry-run", "incoming"]);
    assert_code(&dry, 0);
    let listing = String::from_utf8_lossy(&dry.stdout).into_owned();
    assert_eq!(
        listing.lines().filter(|l| l.starts_with("copy\t")).count(),
        2,
        "{listing}"
    );
    // On purpose, it loads.
    assert_code(
        &w.run(&["-q", "-t", "t", "--reload", "incoming/orders-copy.csv"]),
        0,
    );
    assert!(table_rows(&w.path("t")).len() > rows);
}

#[test]
fn two_identical_new_inputs_in_one_load_are_refused_but_empty_exports_are_not() {
    let w = Workdir::new();
    w.write("in/a.csv", "id,v\n1,x\n2,y\n");
    w.write("in/b.csv", "id,v\n1,x\n2,y\n");
    let out = w.run(&["-t", "t", "in"]);
    assert_code(&out, 1);
    assert!(
        stderr(&out).contains("(also in this load)"),
        "{}",
        stderr(&out)
    );
    assert!(!w.path("t").exists());

    // Header-only exports of quiet days are alike and hold no rows: no copies.
    let w = Workdir::new();
    w.write("in/2026-11-26.csv", "id,v\n");
    w.write("in/2026-11-27.csv", "id,v\n");
    w.write("in/2026-11-28.csv", "id,v\n3,z\n");
    assert_code(&w.run(&["-t", "t", "in"]), 0);
    assert_eq!(table_rows(&w.path("t")).len(), 1);
}
