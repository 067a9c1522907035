//! The csv-spectrum corpus: every file loads and reads back exactly.
//!
//! `location_coordinates.csv` holds U+FFFD replacement characters, which are valid UTF-8
//! (the corpus's upstream Latin-1 degree sign was already replaced), so it loads
//! byte-exact; its JSON disagrees with the CSV upstream on the phone number, so that
//! one field is compared with the CSV itself.

use std::path::PathBuf;

use crate::util::*;

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/testdata/csv-spectrum")
}

#[test]
fn every_spectrum_file_loads_and_reads_back_exactly() {
    let corpus = corpus();
    if !corpus.exists() {
        panic!("csv-spectrum corpus missing at {}", corpus.display());
    }
    let mut checked = 0;
    for entry in std::fs::read_dir(corpus.join("csvs")).unwrap() {
        let csv = entry.unwrap().path();
        let name = csv.file_stem().unwrap().to_str().unwrap().to_string();
        let w = Workdir::new();
        let input = w.write(&format!("{name}.csv"), std::fs::read(&csv).unwrap());
        let out = w.run(&["-t", "t", input.to_str().unwrap()]);
        assert_code(&out, 0);
        let json: serde_json::Value = serde_json::from_slice(
            &std::fs::read(corpus.join("json").join(format!("{name}.json"))).unwrap(),
        )
        .unwrap();
        // A one-row file's JSON is the object itself rather than a list.
        let json = if json.is_array() {
            json
        } else {
            serde_json::Value::Array(vec![json])
        };
        let mut expected: Vec<Row> = serde_json::from_value(json).unwrap();
        if name == "location_coordinates" {
            expected = read_csv(&input, b',');
            assert_eq!(
                expected[0]["Location Coordinates"],
                "37\u{fffd}36'37.8\"N 121\u{fffd}2'17.9\"W"
            );
        }
        assert_same_rows(table_rows(&w.path("t")), expected, &name);
        checked += 1;
    }
    assert_eq!(checked, 12);
}
