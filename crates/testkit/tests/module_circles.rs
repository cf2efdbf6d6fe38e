//! No file of a crate imports, through others, a file that imports it: each crate's rooms
//! stay layered, vocabulary below machinery. An edge is a `crate::a::b` or `super::x` path in
//! a file's code (outside comments and its `#[cfg(test)]` part, where tests may look
//! anywhere) naming another module file; a name a module re-exports (`pub use`, as
//! `crate::Result` is) leads to the file that defines it, not to the re-exporting one. Run
//! alone:
//! `cargo test -p loader-testkit --test module_circles`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

#[test]
fn no_crate_has_an_import_circle_between_its_files() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("the crates directory")
        .map(|e| e.expect("a directory entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 5, "found only {dirs:?}");
    for src in dirs {
        for circle in circles_in(&src) {
            let name = src
                .strip_prefix(&crates)
                .unwrap_or(&src)
                .display()
                .to_string();
            circles.push(format!("crates/{name}: {}", circle.join(", ")));
        }
    }
    assert!(
        circles.is_empty(),
        "import circles between files (move the shared vocabulary below both):\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("w")).unwrap();
    std::fs::write(
        src.join("lib.rs"),
        "mod a; mod b; mod w;\npub use w::{index::{X as Y}, other};",
    )
    .unwrap();
    std::fs::write(
        src.join("a.rs"),
        "use crate::b::B; // crate::c\nuse crate::r::E;",
    )
    .unwrap();
    std::fs::write(src.join("b.rs"), "use crate::{w::index::X, c};").unwrap();
    std::fs::write(src.join("w/mod.rs"), "mod index;").unwrap();
    std::fs::write(
        src.join("w/index.rs"),
        "fn f() { super::super::a::g() }\n#[cfg(test)]\nuse crate::b;",
    )
    .unwrap();
    std::fs::create_dir(src.join("r")).unwrap();
    std::fs::write(src.join("r/mod.rs"), "mod e; mod i; pub use e::E;").unwrap();
    // Through re-exports: `crate::Y` is w/index.rs, `crate::r::E` is r/e.rs.
    std::fs::write(src.join("r/e.rs"), "use crate::Y;").unwrap();
    std::fs::write(
        src.join("r/i.rs"),
        "fn f() -> crate::r::E { todo!() }\nuse crate::a;",
    )
    .unwrap();
    let circles = circles_in(src);
    assert_eq!(circles, [vec!["a.rs", "b.rs", "r/e.rs", "w/index.rs"]]);
}

/// Each strongly connected set of more than one file, by path relative to `src`, sorted.
fn circles_in(src: &Path) -> Vec<Vec<String>> {
    let mut files = Vec::new();
    collect(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> = files
        .iter()
        .map(|f| (module_of(src, f), f.clone()))
        .collect();
    let mut exports = Exports::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).expect("a source file");
        for (name, path) in reexports(module, &modules, &code_of(&text)) {
            exports.insert((module.clone(), name), path);
        }
    }
    let edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = modules
        .iter()
        .map(|(module, file)| {
            let text = std::fs::read_to_string(file).expect("a source file");
            let targets = references(module, &code_of(&text))
                .into_iter()
                .filter_map(|path| resolve(&modules, &exports, &path, 0))
                .filter(|target| target != file)
                .collect();
            (file.clone(), targets)
        })
        .collect();
    let mut circles: Vec<Vec<String>> = strongly_connected(&edges)
        .into_iter()
        .filter(|set| set.len() > 1)
        .map(|set| {
            let mut names: Vec<String> = set
                .iter()
                .map(|f| f.strip_prefix(src).unwrap_or(f).display().to_string())
                .collect();
            names.sort();
            names
        })
        .collect();
    circles.sort();
    circles
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a/b.rs` and `a/b/mod.rs` are module `[a, b]`; `lib.rs` and `main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file
        .strip_prefix(src)
        .expect("under src")
        .with_extension("");
    let mut parts: Module = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|p| matches!(p.as_str(), "mod" | "lib" | "main"))
    {
        parts.pop();
    }
    parts
}

/// The code before the file's tests, without line comments.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    code.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Module paths named in `code`, absolute from the crate root.
fn references(module: &Module, code: &str) -> Vec<Module> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let rest = &code[at..];
        let starts_word = at == 0 || !ident(bytes[at - 1]);
        let (base, skip) = if starts_word && rest.starts_with("crate::") {
            (Vec::new(), "crate::".len())
        } else if starts_word && rest.starts_with("super::") {
            let mut ups = 0;
            while code[at + ups * "super::".len()..].starts_with("super::") {
                ups += 1;
            }
            let keep = module.len().saturating_sub(ups);
            (module[..keep].to_vec(), ups * "super::".len())
        } else {
            at += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        at += skip;
        let (path, used) = path_at(&code[at..]);
        at += used;
        if code[at..].starts_with('{') {
            // `use crate::a::{b, c::d}`: one path per item of the group.
            let group = &code[at + 1..];
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let item = item.split(" as ").next().unwrap_or("").trim();
                if !item.is_empty() {
                    let mut full = base.clone();
                    full.extend(path.iter().cloned());
                    full.extend(item.split("::").map(|s| s.trim().to_string()));
                    out.push(full);
                }
            }
        } else {
            let mut full = base;
            full.extend(path);
            out.push(full);
        }
    }
    out
}

/// The `a::b::c` segments at the start of `text`, and the bytes they take (with a
/// trailing `::` before a group).
fn path_at(text: &str) -> (Module, usize) {
    let mut segments = Vec::new();
    let mut at = 0;
    loop {
        let len = text[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(text.len() - at);
        if len == 0 {
            break;
        }
        segments.push(text[at..at + len].to_string());
        at += len;
        if text[at..].starts_with("::") {
            at += 2;
        } else {
            break;
        }
    }
    (segments, at)
}

/// What each module re-exports: (module, name) -> the absolute path it stands for.
type Exports = BTreeMap<(Module, String), Module>;

/// The file that defines `path`: the longest prefix of it that is a module, unless the next
/// segment is a name that module re-exports, which is followed to where it comes from.
fn resolve(
    modules: &BTreeMap<Module, PathBuf>,
    exports: &Exports,
    path: &Module,
    depth: usize,
) -> Option<PathBuf> {
    let n = (0..=path.len())
        .rev()
        .find(|&n| modules.contains_key(&path[..n]))?;
    if let Some(next) = path.get(n)
        && let Some(target) = exports.get(&(path[..n].to_vec(), next.clone()))
        && depth < 16
    {
        let mut full = target.clone();
        full.extend(path[n + 1..].iter().cloned());
        return resolve(modules, exports, &full, depth + 1);
    }
    // The root itself is no file to depend on: its items are reached through re-exports.
    (n > 0).then(|| modules[&path[..n]].clone())
}

/// The names a module's `pub use` (or `pub(crate) use`) lines re-export, with the absolute
/// paths they stand for; paths into other crates are left out.
fn reexports(
    module: &Module,
    modules: &BTreeMap<Module, PathBuf>,
    code: &str,
) -> Vec<(String, Module)> {
    let mut out = Vec::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(body) = ["pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .find_map(|p| statement.rsplit_once(p).map(|(_, b)| b))
        else {
            continue;
        };
        let body: String = body.split_whitespace().collect::<Vec<_>>().join(" ");
        for (path, name) in flatten_use("", &body) {
            let mut segments: Vec<&str> = path.split("::").collect();
            let base: Module = match segments.first().copied() {
                Some("crate") => {
                    segments.remove(0);
                    Vec::new()
                }
                Some("self") => {
                    segments.remove(0);
                    module.clone()
                }
                Some("super") => {
                    let mut ups = 0;
                    while segments.first() == Some(&"super") {
                        segments.remove(0);
                        ups += 1;
                    }
                    module[..module.len().saturating_sub(ups)].to_vec()
                }
                // A path without a keyword starts at a child module, or is another crate.
                Some(first) => {
                    let mut child = module.clone();
                    child.push(first.to_string());
                    if !modules.contains_key(&child) {
                        continue;
                    }
                    module.clone()
                }
                None => continue,
            };
            let mut full = base;
            full.extend(segments.iter().map(|s| s.to_string()));
            if name != "self" && name != "*" {
                out.push((name, full));
            }
        }
    }
    out
}

/// `a::{b, c::{d as e}}` as `[("a::b", "b"), ("a::c::d", "e")]`.
fn flatten_use(prefix: &str, body: &str) -> Vec<(String, String)> {
    let body = body.trim();
    let joined = |rest: &str| {
        if prefix.is_empty() {
            rest.to_string()
        } else {
            format!("{prefix}::{rest}")
        }
    };
    if let Some(open) = body.find('{') {
        let head = body[..open].trim().trim_end_matches("::");
        let inner = body[open + 1..].trim_end().trim_end_matches('}');
        let mut out = Vec::new();
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(flatten_use(&joined(head), &inner[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        out.extend(flatten_use(&joined(head), &inner[start..]));
        return out;
    }
    if body.is_empty() {
        return Vec::new();
    }
    let (path, alias) = match body.split_once(" as ") {
        Some((p, a)) => (p.trim(), a.trim()),
        None => (body, body.rsplit("::").next().unwrap_or(body)),
    };
    let full = if path == "self" {
        prefix.to_string()
    } else {
        joined(path)
    };
    vec![(full, alias.to_string())]
}

/// Tarjan's strongly connected components.
fn strongly_connected(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'a> {
        graph: &'a BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        out: Vec<Vec<PathBuf>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a PathBuf) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let graph = s.graph;
        for w in graph.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut set = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.push(w.clone());
                if w == v {
                    break;
                }
            }
            s.out.push(set);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}
