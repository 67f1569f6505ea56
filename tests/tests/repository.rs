//! Checks of the repository as a whole, without a control plane: every path the docs name
//! exists, no code outside the upstream-compatibility suite reads beyond the repository, no
//! comment or doc cites a file outside it, and no new import circle between modules.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Result, ensure};

/// Every repository path the README and docs/ name (in backticks or as a Markdown link:
/// `deploy/...`, `docs/...`, `tests/...`, ...) exists, so on-call never follows a pointer to a
/// file that moved. Placeholders (`<name>`, `*`, `{...}`) are not paths.
#[test]
fn paths_named_in_the_docs_exist() -> Result<()> {
    let root = kim_tests::testenv::repo_root();
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs"))? {
        let p = e?.path();
        if p.extension().and_then(|x| x.to_str()) == Some("md") {
            files.push(p);
        }
    }
    const ROOTS: [&str; 11] = [
        "config/",
        "docs/",
        "deploy/",
        "crds/",
        "tests/",
        "webhook/",
        "controller/",
        "shared/",
        "certs/",
        "derive/",
        ".ci/",
    ];
    let (mut checked, mut missing) = (0, Vec::new());
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let ticked = text.split('`').skip(1).step_by(2);
        let linked = text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split(')').next());
        for token in ticked.chain(linked) {
            let path = token
                .split('#')
                .next()
                .unwrap_or_default()
                .trim_end_matches([':', ',', '.']);
            let relative = path.starts_with("../");
            if (!relative && !ROOTS.iter().any(|r| path.starts_with(r)))
                || path.contains(char::is_whitespace)
                || path.contains(['<', '>', '*', '{', '}', '$', '|'])
            {
                continue;
            }
            let base = if relative {
                file.parent().unwrap_or(&root).to_path_buf()
            } else {
                root.clone()
            };
            checked += 1;
            if !base.join(path).exists() {
                missing.push(format!(
                    "{}: {token}",
                    file.strip_prefix(&root).unwrap_or(file).display()
                ));
            }
        }
    }
    ensure!(
        checked > 50,
        "only {checked} paths found: is the scan broken?"
    );
    ensure!(
        missing.is_empty(),
        "the docs name paths that do not exist:\n{}",
        missing.join("\n")
    );
    Ok(())
}

/// Files of the upstream-compatibility suite (and its entry points), the only code that may name
/// upstream's folders or `KIM_UPSTREAM_DIR`.
const UPSTREAM_SUITE: [&str; 4] = [
    "shared/tests/upstream_compat/",
    "tests/tests/upstream_compat_e2e.rs",
    ".ci/run",
    "Makefile",
];

/// Lexically resolves `relative` (which may start with `../`) against `base`; `None` when it
/// climbs above the filesystem root.
fn normalise(base: &std::path::Path, relative: &str) -> Option<std::path::PathBuf> {
    let mut out = base.to_path_buf();
    for part in relative.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if !out.pop() {
                    return None;
                }
            }
            p => out.push(p),
        }
    }
    Some(out)
}

/// The repository is all a user has: no program, test or bench outside the upstream-compatibility
/// suite reads a path outside it. Every code file (Rust, shell, Makefile, Cargo manifests) is
/// scanned for upstream's folder names and `KIM_UPSTREAM_DIR`, and for string literals starting
/// with `../` that resolve, from the file's folder, its crate or the repository root, to no file
/// inside the repository.
#[test]
fn nothing_outside_the_suite_reads_beyond_the_repository() -> Result<()> {
    let root = kim_tests::testenv::repo_root();
    let root = root.canonicalize().unwrap_or(root);
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if path.is_dir() {
                if !(name == "target" || name == ".git") {
                    dirs.push(path);
                }
            } else if name == "Makefile"
                || name == "run"
                || [".rs", ".sh", ".toml", ".env"]
                    .iter()
                    .any(|x| name.ends_with(x))
            {
                files.push(path);
            }
        }
    }
    // This file names the tokens it looks for.
    let this_file = root.join("tests/tests/repository.rs");
    const TOKENS: [&str; 4] = [
        concat!("..", "/shared"),
        "shared/upstream",
        "upstream-2026-07",
        "KIM_UPSTREAM_DIR",
    ];
    let mut found = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&root).unwrap_or(file);
        let in_suite = UPSTREAM_SUITE
            .iter()
            .any(|s| relative.to_string_lossy().starts_with(s));
        if *file == this_file {
            continue;
        }
        let text = std::fs::read_to_string(file)?;
        let crate_dir = root.join(
            relative
                .components()
                .next()
                .map_or("".as_ref(), |c| c.as_os_str()),
        );
        for (n, line) in text.lines().enumerate() {
            let at = || format!("{}:{}: {}", relative.display(), n + 1, line.trim());
            if !in_suite && TOKENS.iter().any(|t| line.contains(t)) {
                found.push(at());
                continue;
            }
            for literal in line.split("\"../").skip(1) {
                let path = literal.split(['"', '{']).next().unwrap_or_default();
                let path = format!("../{path}");
                let inside = [file.parent().unwrap_or(&root), &crate_dir, &root]
                    .iter()
                    .filter_map(|base| normalise(base, &path))
                    .any(|p| p.starts_with(&root) && p.exists());
                if !inside && !in_suite {
                    found.push(at());
                }
            }
        }
    }
    ensure!(
        files.len() > 100,
        "only {} files scanned: is the scan broken?",
        files.len()
    );
    ensure!(
        found.is_empty(),
        "code outside the upstream-compatibility suite reads beyond the repository:\n{}",
        found.join("\n")
    );
    Ok(())
}

/// File names of notes kept outside the repository; a reader of the code has none of them.
const OUTSIDE_FILES: [&str; 6] = [
    "reference/",
    "kim-upstream.md",
    "gardener-api.md",
    "testenv.md",
    "anchors.md",
    "upstream-issues.md",
];

/// Words that, followed by a number, cite a numbered section or item of such a file
/// ("reference 4.2", "reference section 7.3", "quirk 7").
const NUMBERED_CITATIONS: [&str; 2] = ["reference", "quirk"];

/// The citation of a file outside the repository in `line` (lower-cased by the caller), if any.
/// `next` is the following line with its comment markers removed, for a citation broken over
/// two lines ("reference" at the end of one, the number at the start of the next). Links to web
/// pages (`https://...`) are not citations.
fn outside_citation(line: &str, next: &str) -> Option<String> {
    let in_url = |at: usize| {
        let start = line[..at]
            .rfind(|c: char| c.is_whitespace() || "`()[]<>\"'".contains(c))
            .map_or(0, |i| i + 1);
        line[start..].starts_with("http://") || line[start..].starts_with("https://")
    };
    for name in OUTSIDE_FILES {
        if line.match_indices(name).any(|(at, _)| !in_url(at)) {
            return Some(name.to_owned());
        }
    }
    for word in NUMBERED_CITATIONS {
        for (at, _) in line.match_indices(word) {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '/') {
                continue;
            }
            let rest = &line[at + word.len()..];
            let rest = [" sections", " section"]
                .iter()
                .find_map(|s| rest.strip_prefix(s))
                .unwrap_or(rest);
            let number_follows = match rest.strip_prefix(' ') {
                Some(r) => r.starts_with(|c: char| c.is_ascii_digit()),
                None => rest.trim().is_empty() && next.starts_with(|c: char| c.is_ascii_digit()),
            };
            if number_follows {
                return Some(format!("{word} <number>"));
            }
        }
    }
    None
}

/// No comment, doc string or doc cites a file that is not in this repository (the notes an
/// implementation was written from, by name or as "reference 3.8" / "quirk 7"): a reader has
/// only the repository, so the fact is stated where it is used, or the upstream behaviour is an
/// entry of `docs/upstream-differences.md`. Every `*.rs` file is scanned, and the Markdown of
/// `docs/` and the README.
#[test]
fn no_comment_cites_files_outside_the_repository() -> Result<()> {
    let root = kim_tests::testenv::repo_root();
    let root = root.canonicalize().unwrap_or(root);
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs"))? {
        let p = e?.path();
        if p.extension().and_then(|x| x.to_str()) == Some("md") {
            files.push(p);
        }
    }
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                if !(name == "target" || name == ".git") {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") {
                files.push(path);
            }
        }
    }
    // This file names the patterns it looks for.
    let this_file = root.join("tests/tests/repository.rs");
    let mut found = Vec::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let text = std::fs::read_to_string(file)?;
        let lines: Vec<&str> = text.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            let next = lines
                .get(n + 1)
                .map(|l| {
                    l.trim_start()
                        .trim_start_matches(['/', '!', '*', '#', '>', '-', ' '])
                })
                .unwrap_or_default();
            if let Some(what) = outside_citation(&line.to_lowercase(), next) {
                let relative = file.strip_prefix(&root).unwrap_or(file);
                found.push(format!(
                    "{}:{}: {what}: {}",
                    relative.display(),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    ensure!(
        files.len() > 100,
        "only {} files scanned: is the scan broken?",
        files.len()
    );
    ensure!(
        found.is_empty(),
        "comments or docs cite files outside the repository; state the fact where it is used, \
         or name the entry of docs/upstream-differences.md:\n{}",
        found.join("\n")
    );
    Ok(())
}

/// Import circles between modules that exist today and are to be removed (each names its
/// modules in sorted order). The check fails on any other circle, and on a listed one that is
/// gone, so that the list only shrinks.
const KNOWN_CIRCLES: &[&[&str]] = &[
    // The test environment starts the fixtures and the simulator, which use its error type,
    // paths and cluster facts.
    &[
        "kim_tests::fixtures",
        "kim_tests::simulator",
        "kim_tests::testenv",
    ],
];

/// A crate's modules: `(module path, file)`, from its `src/` layout (`lib.rs`/`main.rs` is the
/// crate root, `a.rs` or `a/mod.rs` is `a`, `a/b.rs` is `a::b`).
fn modules(crate_name: &str, src: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap_or(&path).with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            let module = std::iter::once(crate_name.to_owned())
                .chain(parts)
                .collect::<Vec<_>>();
            out.push((module.join("::"), path));
        }
    }
    out
}

/// Expands the paths of one `use` tree (`a::{b, c::{d, e}}`) into full paths.
fn expand_use(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::").trim();
        let close = tree.rfind('}').filter(|c| *c > open).unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let base = join(prefix, head);
        let (mut depth, mut start) = (0, 0);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&base, &inner[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&base, &inner[start..], out);
    } else if !tree.is_empty() {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        out.push(join(prefix, path));
    }
}

fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}::{b}"),
    }
}

/// The module paths a file refers to: its `use` trees and the `crate::`/`super::`/`self::`
/// paths in its code, made absolute from `module` (comments are left out).
fn references(module: &str, is_mod_root: bool, text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut paths = Vec::new();
    let mut lines = code.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let Some(tree) = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| line.strip_prefix(p))
        else {
            continue;
        };
        let mut statement = tree.to_owned();
        while !statement.contains(';') {
            match lines.next() {
                Some(more) => statement.push_str(more),
                None => break,
            }
        }
        let statement = statement.split(';').next().unwrap_or_default();
        expand_use("", statement, &mut paths);
    }
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let boundary = i == 0
            || !(bytes[i - 1].is_alphanumeric() || bytes[i - 1] == '_' || bytes[i - 1] == ':');
        if boundary
            && (rest.starts_with("crate::")
                || rest.starts_with("super::")
                || rest.starts_with("self::"))
        {
            let mut j = i;
            while j < bytes.len()
                && (bytes[j].is_alphanumeric() || bytes[j] == '_' || bytes[j] == ':')
            {
                j += 1;
            }
            paths.push(
                bytes[i..j]
                    .iter()
                    .collect::<String>()
                    .trim_end_matches(':')
                    .to_owned(),
            );
            i = j;
        } else {
            i += 1;
        }
    }
    let crate_name = module.split("::").next().unwrap_or_default();
    let mut parent: Vec<&str> = module.split("::").collect();
    // `super` of a file module is its parent; of a `mod.rs`/`a.rs` folder root, the same.
    let _ = is_mod_root;
    parent.pop();
    paths
        .into_iter()
        .filter_map(|p| {
            let mut parts = p.split("::");
            let first = parts.next()?;
            let rest: Vec<&str> = parts.collect();
            let base = match first {
                "crate" => crate_name.to_owned(),
                "self" => module.to_owned(),
                "super" => {
                    let mut up = parent.clone();
                    let mut rest = rest.as_slice();
                    while rest.first() == Some(&"super") {
                        up.pop();
                        rest = &rest[1..];
                    }
                    return Some(join(&up.join("::"), &rest.join("::")));
                }
                _ => return None,
            };
            Some(join(&base, &rest.join("::")))
        })
        .collect()
}

/// Strongly connected components with more than one module (Tarjan), each sorted.
fn circles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[w].min(s.low[v]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.index[w].min(s.low[v]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.out.sort();
    state.out
}

/// Module imports form no circle beyond [`KNOWN_CIRCLES`]. Modules are the files of each crate's
/// `src/` and of the end-to-end test binary (`tests/tests/e2e/`); an edge goes from a module to every other module whose items it names through
/// `crate::`, `super::` or `self::` (in `use` trees and in code). Edges between a module and its
/// ancestors are left out: a parent declares, re-exports and calls its children, and children
/// use their parent's types, which is how Rust modules are built.
#[test]
fn no_new_import_circles() -> Result<()> {
    let root = kim_tests::testenv::repo_root();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut module_count = 0;
    // Each crate's `src/`, and the end-to-end test binary, whose modules are as many.
    let mut trees = vec![("e2e".to_owned(), root.join("tests/tests/e2e"))];
    for entry in std::fs::read_dir(&root)? {
        let dir = entry?.path();
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let Some(name) = text
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').replace('-', "_"))
        else {
            continue;
        };
        trees.push((name, dir.join("src")));
    }
    for (name, dir) in &trees {
        let mods = modules(name, dir);
        module_count += mods.len();
        let known: BTreeSet<&str> = mods.iter().map(|(m, _)| m.as_str()).collect();
        for (module, file) in &mods {
            let is_root = file.file_name().is_some_and(|f| f == "mod.rs");
            let text = std::fs::read_to_string(file)?;
            for path in references(module, is_root, &text) {
                // The longest module that is a prefix of the path.
                let mut parts: Vec<&str> = path.split("::").collect();
                let target = loop {
                    let candidate = parts.join("::");
                    if known.contains(candidate.as_str()) || parts.is_empty() {
                        break candidate;
                    }
                    parts.pop();
                };
                let related = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}::"));
                if target.is_empty() || related(module, &target) || related(&target, module) {
                    continue;
                }
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    ensure!(
        module_count > 100,
        "only {module_count} modules found: is the scan broken?"
    );
    let found = circles(&edges);
    let known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|m| (*m).to_owned()).collect())
        .collect();
    let new: Vec<&Vec<String>> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<&Vec<String>> = known.iter().filter(|c| !found.contains(c)).collect();
    ensure!(
        new.is_empty(),
        "new import circles between modules (break them, e.g. by moving the shared items into a \
         leaf module):\n{}",
        new.iter()
            .map(|c| c.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    ensure!(
        gone.is_empty(),
        "circles listed in KNOWN_CIRCLES no longer exist; remove them from the list:\n{}",
        gone.iter()
            .map(|c| c.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}
