//! CSV edge cases, from `fixtures/csv-edges/`: every `NAME.csv` loads and reads back
//! exactly as `NAME.json` (a list of objects) says. The cases are the ones the public
//! csv-spectrum corpus covers (commas, quotes, newlines and CRLF inside quoted fields,
//! empty fields, JSON in a field, multi-byte UTF-8, U+FFFD); `.ci/spectrum.py` runs the
//! corpus itself in CI, where it is available beside the repository.

use std::path::PathBuf;

use crate::util::*;

fn cases() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/csv-edges")
}

#[test]
fn every_csv_edge_case_loads_and_reads_back_exactly() {
    let mut checked = 0;
    let mut names: Vec<PathBuf> = std::fs::read_dir(cases())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "csv"))
        .collect();
    names.sort();
    for csv in names {
        let name = csv.file_stem().unwrap().to_str().unwrap().to_string();
        let w = Workdir::new();
        let input = w.write(&format!("{name}.csv"), std::fs::read(&csv).unwrap());
        let out = w.run(&["-t", "t", input.to_str().unwrap()]);
        assert_code(&out, 0);
        let expected: Vec<Row> =
            serde_json::from_slice(&std::fs::read(cases().join(format!("{name}.json"))).unwrap())
                .unwrap();
        assert!(!expected.is_empty(), "{name}: no expected rows");
        assert_same_rows(table_rows(&w.path("t")), expected, &name);
        checked += 1;
    }
    assert_eq!(checked, 12);
}
