//! The layout's rules, read from the source: the HTTP layers (`src/http1/`, `src/http2/`,
//! `src/listener/`) import nothing of the domain, and the top-level modules of `src/`
//! import one another without a cycle. A `crate::` path anywhere in a file (a `use` line or
//! a path written inline; comments skipped) is an import of the top-level module it names.
//! Test code is left out (`tests.rs` files, `tests/` folders, `#[cfg(test)] mod` blocks):
//! a test may reach for whatever it checks. docs/architecture.md ("Layers") says why.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// What each HTTP layer may import: itself and the layers under it.
const LAYERS: &[(&str, &[&str])] = &[
    ("http1", &["http1"]),
    // http2/ names only http1's error type: a stream's session fails as an HTTP/1 one does.
    ("http2", &["http2", "http1"]),
    ("listener", &["listener", "http1", "http2"]),
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(&path) {
            found.push(path);
        }
    }
}

/// A file of tests only: `tests.rs`, or anything under a `tests/` folder.
fn is_test_file(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

/// `text` without its `#[cfg(test)]` modules written inline (`mod name {` to its closing
/// brace).
fn without_test_modules(text: &str) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let opens_test_module = line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|next| {
                let next = next.trim_start();
                next.trim_end().ends_with('{')
                    && (next.starts_with("mod ")
                        || next.starts_with("pub") && next.contains(" mod "))
            });
        if !opens_test_module {
            kept.push_str(line);
            kept.push('\n');
            continue;
        }
        let mut depth = 0i32;
        for inner in lines.by_ref() {
            let inner = code(inner);
            depth += inner.matches('{').count() as i32 - inner.matches('}').count() as i32;
            if depth <= 0 && inner.contains('}') {
                break;
            }
        }
    }
    kept
}

/// The top-level module a file belongs to (`upstream` for `src/upstream/pool.rs` and
/// `src/upstream.rs`); `None` for the crate root and the binary.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_owned())
}

/// The code of a line, its `//` comment cut off (and anything after a `//` in a string,
/// which can only hide an import, never invent one).
fn code(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// The top-level modules `text` names after `crate::`, a braced list's included
/// (`crate::{a, b::c}` names `a` and `b`).
fn imports(text: &str) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for line in text.lines() {
        let line = code(line);
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            // `sluice::crate::` cannot occur; `$crate::` (macros) is not ours to follow.
            let before = &rest[..at];
            rest = &rest[at + "crate::".len()..];
            if before.ends_with('$') || before.ends_with(|c: char| c.is_alphanumeric() || c == '_')
            {
                continue;
            }
            if let Some(list) = rest.strip_prefix('{') {
                let mut depth = 0;
                let mut item = String::new();
                for c in list.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            named.extend(first_segment(&item));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                named.extend(first_segment(&item));
            } else {
                named.extend(first_segment(rest));
            }
        }
    }
    named
}

fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && name.starts_with(|c: char| c.is_ascii_lowercase())).then_some(name)
}

/// The top-level module graph: each module's imports of the others, with the files that
/// make each edge.
fn graph() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in files {
        let Some(module) = module_of(&src, &file) else {
            continue;
        };
        let text = std::fs::read_to_string(&file).expect("a source file is readable");
        let text = without_test_modules(&text);
        let edges = graph.entry(module.clone()).or_default();
        for target in imports(&text) {
            if target != module {
                let shown = file
                    .strip_prefix(&src)
                    .unwrap_or(&file)
                    .display()
                    .to_string();
                edges.entry(target).or_default().insert(shown);
            }
        }
    }
    graph
}

#[test]
fn the_http_layers_import_nothing_of_the_domain() {
    let graph = graph();
    let mut broken = Vec::new();
    for (layer, allowed) in LAYERS {
        let edges = graph.get(*layer).expect("the layer's folder exists");
        for (target, files) in edges {
            if !allowed.contains(&target.as_str()) {
                broken.push(format!("{layer} imports {target} (in {files:?})"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "http1/ imports only itself, http2/ itself and http1/ (its error), listener/ itself, http1/ and http2/:\n{}",
        broken.join("\n")
    );
}

/// The modules in a cycle or leading into one, each with its edges among them; empty when
/// the graph is acyclic (Kahn: modules importing nothing left are taken until none is).
fn cyclic(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<String> {
    let mut left: BTreeMap<&str, BTreeSet<&str>> = graph
        .iter()
        .map(|(module, edges)| {
            let targets = edges
                .keys()
                .filter(|t| graph.contains_key(*t))
                .map(String::as_str)
                .collect();
            (module.as_str(), targets)
        })
        .collect();
    loop {
        let leaves: Vec<&str> = left
            .iter()
            .filter(|(_, targets)| targets.is_empty())
            .map(|(module, _)| *module)
            .collect();
        if leaves.is_empty() {
            break;
        }
        for leaf in leaves {
            left.remove(leaf);
            for targets in left.values_mut() {
                targets.remove(leaf);
            }
        }
    }
    left.iter()
        .map(|(module, targets)| {
            let files: Vec<String> = targets
                .iter()
                .map(|t| format!("{t} {:?}", graph[*module][*t]))
                .collect();
            format!("{module} -> {}", files.join(", "))
        })
        .collect()
}

#[test]
fn the_top_level_modules_import_one_another_without_a_cycle() {
    let cycle = cyclic(&graph());
    assert!(
        cycle.is_empty(),
        "the top-level modules form no cycle; these are in or lead into one:\n{}",
        cycle.join("\n")
    );
}

#[test]
fn a_cycle_is_found_and_named() {
    let edge = |from: &str, to: &str| (from.to_owned(), to.to_owned());
    let build = |edges: &[(String, String)]| {
        let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for (from, to) in edges {
            graph.entry(to.clone()).or_default();
            graph
                .entry(from.clone())
                .or_default()
                .entry(to.clone())
                .or_default()
                .insert(format!("{from}.rs"));
        }
        graph
    };
    let acyclic = build(&[
        edge("proxy", "catalog"),
        edge("catalog", "error"),
        edge("proxy", "error"),
    ]);
    assert!(cyclic(&acyclic).is_empty(), "a diamond is no cycle");
    let cycle = build(&[
        edge("proxy", "catalog"),
        edge("catalog", "upstream"),
        edge("upstream", "catalog"),
        edge("catalog", "error"),
    ]);
    assert_eq!(
        cyclic(&cycle),
        [
            "catalog -> upstream {\"catalog.rs\"}",
            "proxy -> catalog {\"proxy.rs\"}",
            "upstream -> catalog {\"upstream.rs\"}",
        ],
        "the cycle and what leads into it are named, not what it leads to"
    );
}

#[test]
fn test_modules_are_left_out() {
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n    use crate::b;\n    fn f() { crate::c::d(); }\n}\nuse crate::e;\n";
    let found: Vec<String> = imports(&without_test_modules(text)).into_iter().collect();
    assert_eq!(found, ["a", "e"]);
}

#[test]
fn imports_are_read_from_use_lines_lists_and_inline_paths() {
    let text = "use crate::{catalog::Key, error::{A, B}};\nlet x = crate::metrics::new(); // crate::proxy\nuse $crate::nope;";
    let found: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(found, ["catalog", "error", "metrics"]);
}

/// The files that may name pingora's `ErrorType`: only the connector's failures (a
/// connection that could not be opened): made by our plain TCP connect as pingora's
/// connector makes them (`upstream/connect.rs`), classified in `upstream/verdict.rs`. A
/// failure of the HTTP layer is its own `http1::Error`, matched by variant, never by
/// pingora's error kinds.
const ERROR_TYPE_ALLOWED: &[&str] = &["upstream/connect.rs", "upstream/verdict.rs"];

/// The source files (tests left out) whose code names `needle`, as paths under `src/`.
fn files_naming(needle: &str) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut naming: Vec<String> = files
        .iter()
        .filter(|file| {
            let text = std::fs::read_to_string(file).expect("a source file is readable");
            without_test_modules(&text)
                .lines()
                .any(|line| code(line).contains(needle))
        })
        .map(|file| {
            let shown = file.strip_prefix(&src).unwrap_or(file);
            shown.display().to_string().replace('\\', "/")
        })
        .collect();
    naming.sort();
    naming
}

#[test]
fn no_caller_classifies_an_http_layer_failure_by_pingora_error_kinds() {
    let naming: Vec<String> = files_naming("ErrorType")
        .into_iter()
        .filter(|file| !ERROR_TYPE_ALLOWED.contains(&file.as_str()))
        .collect();
    assert!(
        naming.is_empty(),
        "pingora's ErrorType is named outside {ERROR_TYPE_ALLOWED:?}: {naming:?}"
    );
    assert_eq!(
        files_naming("PrematureBodyEnd"),
        Vec::<String>::new(),
        "an answer ended short is http1::Error::PrematureEnd"
    );
}
