//! `cargo xtask layers`: which top-level module of a crate imports which, the import cycles among them, and the
//! arrows that point up a declared ladder of layers.
//!
//! A reference is any path that names another module of the same crate: `crate::x`, `$crate::x`, `super::x` (resolved
//! from the module the path sits in, inline `mod` blocks included) and the first items of a grouped
//! `use crate::{x, y::z}`. Comments and string literals are skipped. An edge `a → b` means code of top-level module `a`
//! (or of a module inside it) names something in top-level module `b`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// The top-level modules of one crate and what each imports.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Graph {
    /// Every top-level module (a file or directory beside the crate root), with the modules it imports.
    pub edges: BTreeMap<String, BTreeSet<String>>,
}

/// A declared ladder: each top-level module's layer, lower numbers lower. A module may import modules of its own
/// layer or below.
#[derive(Debug)]
pub struct Ladder {
    pub layers: BTreeMap<String, (u32, String)>,
}

impl Ladder {
    /// Reads `LAYERS` files: one line per layer, `name: module module …`, lowest first; `#` starts a comment.
    pub fn parse(text: &str) -> Result<Ladder> {
        let mut layers = BTreeMap::new();
        for (index, line) in
            text.lines().map(|l| l.split('#').next().unwrap_or("").trim()).filter(|l| !l.is_empty()).enumerate()
        {
            let (name, modules) =
                line.split_once(':').with_context(|| format!("layer line `{line}` has no `name:`"))?;
            for module in modules.split_whitespace() {
                if layers.insert(module.to_owned(), (index as u32, name.trim().to_owned())).is_some() {
                    bail!("module `{module}` is in two layers");
                }
            }
        }
        Ok(Ladder { layers })
    }
}

/// Reads every `.rs` file under `src` (the crate root `lib.rs`/`main.rs` included) and builds the graph of its
/// top-level modules.
pub fn graph_of(src: &Path) -> Result<Graph> {
    let mut files = Vec::new();
    collect_files(src, &mut files)?;
    let mut graph = Graph::default();
    let tops: BTreeSet<String> = files.iter().filter_map(|f| module_path(src, f).first().cloned()).collect();
    for top in &tops {
        graph.edges.entry(top.clone()).or_default();
    }
    for file in &files {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let path = module_path(src, file);
        for target in references(&text, &path) {
            if let Some(from) = target.0.first() {
                if tops.contains(&target.1) && *from != target.1 {
                    graph.edges.entry(from.clone()).or_default().insert(target.1.clone());
                }
            }
        }
    }
    Ok(graph)
}

fn collect_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect_files(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    Ok(())
}

/// The module a file holds: `src/comm/init.rs` → `[comm, init]`, `src/comm/mod.rs` → `[comm]`, `src/lib.rs` → `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut parts: Vec<String> = relative.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs").to_owned();
        if !(stem == "mod" || (parts.is_empty() && (stem == "lib" || stem == "main"))) {
            parts.push(stem);
        }
    }
    parts
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Punct(char),
    PathSep,
}

/// The tokens of Rust source, without comments, string and character literals (enough to find paths).
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || (next == Some('#') && raw_string_start(&chars, i + 1))) {
            let mut hashes = 0;
            i += 1;
            while chars.get(i) == Some(&'#') {
                hashes += 1;
                i += 1;
            }
            i += 1; // the opening quote
            while i < chars.len() {
                if chars[i] == '"' && (0..hashes).all(|h| chars.get(i + 1 + h) == Some(&'#')) {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
        } else if c == '"' || (c == 'b' && next == Some('"')) {
            i += if c == 'b' { 2 } else { 1 };
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

fn raw_string_start(chars: &[char], mut i: usize) -> bool {
    while chars.get(i) == Some(&'#') {
        i += 1;
    }
    chars.get(i) == Some(&'"')
}

/// Every module a file's paths name: `(the module the path sits in, the top-level module it names)`.
fn references(text: &str, file_module: &[String]) -> Vec<(Vec<String>, String)> {
    let tokens = tokens(text);
    let mut found = Vec::new();
    // Inline `mod name { … }` blocks: (the brace depth inside them, their name).
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let here = || -> Vec<String> {
            let mut path = file_module.to_vec();
            path.extend(inline.iter().map(|(_, name)| name.clone()));
            path
        };
        match &tokens[i] {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Token::Ident(word) if word == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Punct('{'))) = (tokens.get(i + 1), tokens.get(i + 2)) {
                    inline.push((depth + 1, name.clone()));
                }
            }
            Token::Ident(word) if word == "crate" || word == "super" => {
                // `$crate` and `crate` alike; not `pub(crate)` alone (no `::` after it).
                let mut base: Vec<String> = if word == "crate" {
                    Vec::new()
                } else {
                    let mut module = here();
                    module.pop();
                    module
                };
                let mut j = i + 1;
                while tokens.get(j) == Some(&Token::PathSep) && tokens.get(j + 1) == Some(&Token::Ident("super".into()))
                {
                    base.pop();
                    j += 2;
                }
                if tokens.get(j) == Some(&Token::PathSep) {
                    let targets = path_heads(&tokens, j + 1);
                    for head in targets {
                        let top = base.first().cloned().unwrap_or(head);
                        found.push((here(), top));
                    }
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The first segment after `::`: one identifier, or each item's first identifier in a `{ … }` group.
fn path_heads(tokens: &[Token], at: usize) -> Vec<String> {
    match tokens.get(at) {
        Some(Token::Ident(name)) => vec![name.clone()],
        Some(Token::Punct('{')) => {
            let mut heads = Vec::new();
            let mut depth = 0;
            let mut expect_head = true;
            for token in &tokens[at..] {
                match token {
                    Token::Punct('{') => {
                        depth += 1;
                        if depth == 1 {
                            expect_head = true;
                        }
                    }
                    Token::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    Token::Punct(',') if depth == 1 => expect_head = true,
                    Token::Ident(name) if depth == 1 && expect_head => {
                        heads.push(name.clone());
                        expect_head = false;
                    }
                    _ => {
                        if depth == 1 {
                            expect_head = false;
                        }
                    }
                }
            }
            heads
        }
        _ => Vec::new(),
    }
}

/// The strongly connected components of more than one module (the import cycles), each sorted.
pub fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    // Tarjan's algorithm over the module names.
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        next: usize,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
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
                s.found.push(component);
            }
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        found: Vec::new(),
    };
    for v in graph.edges.keys() {
        if !state.index.contains_key(v.as_str()) {
            visit(&mut state, v);
        }
    }
    state.found.sort();
    state.found
}

/// Arrows that point up the ladder, and modules it does not place.
pub fn violations(graph: &Graph, ladder: &Ladder) -> Vec<String> {
    let mut problems = Vec::new();
    for (from, targets) in &graph.edges {
        let Some((from_layer, from_name)) = ladder.layers.get(from) else {
            problems.push(format!("module `{from}` is in no layer: add it to the crate's LAYERS file"));
            continue;
        };
        for to in targets {
            if let Some((to_layer, to_name)) = ladder.layers.get(to) {
                if to_layer > from_layer {
                    problems.push(format!("`{from}` ({from_name}) imports `{to}` ({to_name}), a higher layer"));
                }
            }
        }
    }
    problems
}

/// The report `cargo xtask layers` prints for one crate.
pub fn report(name: &str, graph: &Graph, ladder: Option<&Ladder>) -> (String, bool) {
    let mut text = String::new();
    let _ = writeln!(text, "{name}: {} top-level modules", graph.edges.len());
    for (from, targets) in &graph.edges {
        let layer = ladder.and_then(|l| l.layers.get(from)).map(|(_, n)| format!(" [{n}]")).unwrap_or_default();
        let list: Vec<&str> = targets.iter().map(String::as_str).collect();
        let _ =
            writeln!(text, "  {from}{layer} -> {}", if list.is_empty() { "(nothing)".into() } else { list.join(", ") });
    }
    let cycles = cycles(graph);
    for cycle in &cycles {
        let _ = writeln!(text, "  cycle of {}: {}", cycle.len(), cycle.join(", "));
    }
    let problems = ladder.map(|l| violations(graph, l)).unwrap_or_default();
    for problem in &problems {
        let _ = writeln!(text, "  {problem}");
    }
    (text, cycles.is_empty() && problems.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph_from(files: &[(&str, &str)]) -> Graph {
        let dir = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        graph_of(dir.path()).unwrap()
    }

    fn edges(graph: &Graph, from: &str) -> Vec<String> {
        graph.edges[from].iter().cloned().collect()
    }

    #[test]
    fn paths_of_every_form_make_edges() {
        let graph = graph_from(&[
            ("lib.rs", "mod a; mod b; mod c; mod d;"),
            ("a.rs", "use crate::b::Thing;\nfn f() { super::c::g(); }"),
            ("b/mod.rs", "mod inner;\nuse crate::{c::X, d};"),
            ("b/inner.rs", "use super::super::a::Y; use super::Z;"),
            ("c.rs", "macro_rules! m { () => { $crate::d::h() } }"),
            ("d.rs", "pub(crate) fn h() {}"),
        ]);
        assert_eq!(edges(&graph, "a"), ["b", "c"]);
        assert_eq!(edges(&graph, "b"), ["a", "c", "d"], "super::Z inside b is b itself");
        assert_eq!(edges(&graph, "c"), ["d"]);
        assert!(edges(&graph, "d").is_empty(), "pub(crate) is no path");
    }

    #[test]
    fn comments_strings_and_inline_test_modules_are_read_right() {
        let graph = graph_from(&[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "// use crate::b;\n/* crate::b */ const S: &str = \"crate::b\"; const R: &str = r#\"crate::b\"#;\n\
                 fn f<'x>(c: char) -> bool { c == '\"' }\n#[cfg(test)] mod tests { use super::f; }",
            ),
            ("b.rs", ""),
        ]);
        assert!(edges(&graph, "a").is_empty(), "{graph:?}");
    }

    #[test]
    fn cycles_and_upward_arrows_are_found() {
        let graph = graph_from(&[
            ("lib.rs", ""),
            ("low.rs", "use crate::high::X;"),
            ("mid.rs", "use crate::low::Y;"),
            ("high.rs", "use crate::mid::Z; use crate::low::W;"),
            ("odd.rs", ""),
        ]);
        assert_eq!(cycles(&graph), [vec!["high".to_owned(), "low".to_owned(), "mid".to_owned()]]);
        let ladder = Ladder::parse("# lowest first\nffi: low\nsafe: mid\ntop: high\n").unwrap();
        let problems = violations(&graph, &ladder);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("`low` (ffi) imports `high` (top)"), "{problems:?}");
        assert!(problems[1].contains("`odd` is in no layer"), "{problems:?}");
        assert!(Ladder::parse("a: x\nb: x").is_err());
    }
}
