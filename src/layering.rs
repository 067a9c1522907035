//! The layering rule, enforced: each folder of `src/` is a layer and names (`crate::…`)
//! only the layers it may use, all below it; and no two files name each other, directly
//! or around a circle. Test modules are exempt: a test may build what it needs from
//! anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each layer, bottom up, with the layers it may use. The participants (`source`,
/// `stage`, `sink`, `table`) prepare and hand over; they never touch the job's `state`.
const LAYERS: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("storage", &["core"]),
    ("state", &["core", "storage"]),
    ("source", &["core", "storage"]),
    ("stage", &["core", "source"]),
    ("sink", &["core", "storage"]),
    ("table", &["core", "storage", "sink"]),
    (
        "ops",
        &[
            "core", "storage", "state", "source", "stage", "sink", "table",
        ],
    ),
    (
        "cli",
        &[
            "core", "storage", "state", "source", "stage", "sink", "table", "ops",
        ],
    ),
];

/// Every module of `src/` (as its path of names) with the modules its code names.
fn imports() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut code = BTreeMap::new();
    for entry in walkdir::WalkDir::new(&src).into_iter().map(Result::unwrap) {
        let rel = entry.path().strip_prefix(&src).unwrap().with_extension("");
        let in_a_layer = rel.components().count() > 1;
        let mut module: Vec<String> = rel.iter().map(|c| c.to_string_lossy().into()).collect();
        if module.last().is_some_and(|m| m == "mod") {
            module.pop();
        }
        if entry.path().extension().is_some_and(|e| e == "rs") && in_a_layer {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            let own = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap()
                .to_string();
            code.insert(module, own);
        }
    }
    let modules: BTreeSet<Vec<String>> = code.keys().cloned().collect();
    let mut graph = BTreeMap::new();
    for (module, text) in &code {
        let mut named = BTreeSet::new();
        for path in text.split("crate::").skip(1) {
            let mut path: Vec<String> = path
                .split("::")
                .map(|seg| seg.chars().take_while(|c| c.is_alphanumeric() || *c == '_'))
                .map(|seg| seg.collect())
                .take_while(|seg: &String| !seg.is_empty())
                .collect();
            while !path.is_empty() && !modules.contains(&path) {
                path.pop();
            }
            if !path.is_empty() && &path != module {
                named.insert(path);
            }
        }
        graph.insert(module.clone(), named);
    }
    graph
}

#[test]
fn each_layer_names_only_the_layers_below_it_that_it_may_use() {
    let allowed: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut wrong = Vec::new();
    for (module, named) in imports() {
        let layer = module[0].as_str();
        let may = allowed
            .get(layer)
            .unwrap_or_else(|| panic!("{layer}/ is in no layer"));
        for other in named.iter().map(|n| n[0].as_str()) {
            if other != layer && !may.contains(&other) {
                wrong.push(format!("{} uses {other}", module.join("/")));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layering: {wrong:#?}");
}

#[test]
fn no_files_import_each_other_around_a_circle() {
    let graph = imports();
    // Depth-first; a module met again while still on the path closes a circle.
    fn visit<'a>(
        m: &'a Vec<String>,
        graph: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        path: &mut Vec<&'a Vec<String>>,
        done: &mut BTreeSet<&'a Vec<String>>,
    ) {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let circle: Vec<String> = path[at..].iter().map(|p| p.join("/")).collect();
            panic!(
                "an import circle: {} -> {}",
                circle.join(" -> "),
                m.join("/")
            );
        }
        if done.insert(m) {
            path.push(m);
            for next in &graph[m] {
                visit(next, graph, path, done);
            }
            path.pop();
        }
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        visit(module, &graph, &mut Vec::new(), &mut done);
    }
}
