//! Inputs for the fuzzer: the repository's kernels mutated at the token level and at the syntax-tree level, random
//! attribute arguments, and random token streams. Everything is kept as text and lexed afresh for each input, so the
//! tokens carry real source positions (the span check needs them) and no span outlives its input.

use std::collections::BTreeSet;
use std::str::FromStr;

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit::Visit;
use syn::visit_mut::VisitMut;

use crate::codegen::ast::FnKind;

/// splitmix64: small, fast, and the same sequence on every machine (the CI run is reproducible from its seed).
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True `percent`% of the time.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// One input: which macro, its attribute's arguments and the item, as source text.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    pub(crate) kind: FnKind,
    pub(crate) attr: String,
    pub(crate) item: String,
}

/// What mutations draw from, collected from the seeds.
pub(crate) struct Pools {
    pub(crate) seeds: Vec<Input>,
    idents: Vec<String>,
    exprs: Vec<String>,
    types: Vec<String>,
    pats: Vec<String>,
    stmts: Vec<String>,
    attrs: Vec<String>,
}

/// Identifiers that stress the translation: keywords, C++ reserved words, the translation's own temporaries,
/// vocabulary names in the wrong place.
const EXTRA_IDENTS: &[&str] = &[
    "self",
    "Self",
    "super",
    "crate",
    "r#fn",
    "r#match",
    "_",
    "async",
    "dyn",
    "impl",
    "unsafe",
    "const",
    "static",
    "mut",
    "ref",
    "move",
    "loop",
    "while",
    "for",
    "in",
    "if",
    "else",
    "match",
    "return",
    "break",
    "continue",
    "let",
    "fn",
    "struct",
    "new",
    "class",
    "int",
    "auto",
    "template",
    "threadIdx",
    "float",
    "size_t",
    "min",
    "ncclDevComm",
    "__syncthreads",
    "NULL",
    "rs_x",
    "w_matched",
    "w_i_end",
    "weft",
    "weft_tuple2",
    "__weft_x",
    "matched",
    "tuple",
    "i_end",
    "outer_break",
    "loop1_next",
    "T",
    "I",
    "C",
    "Co",
    "u128",
    "i128",
    "char",
    "str",
    "String",
    "Vec",
    "Option",
    "Some",
    "None",
    "Box",
    "Window",
    "WindowView",
    "DevComm",
    "SharedArray",
    "Pack",
    "WidePack",
    "LsaBarrier",
    "GinSession",
    "Team",
    "Lanes",
    "WarpSpan",
    "Cta",
    "Warp",
    "Thread",
    "Order",
    "Scope",
    "BarrierResult",
    "SignalInc",
    "NoAction",
    "LlA2aHandle",
    "MultimemView",
    "INFINITY",
    "NAN",
    "MAX",
    "MIN",
    "BITS",
    "WARP_SIZE",
    "grid_stride",
    "block_idx_x",
    "lsa_barrier",
    "gin",
    "recv",
    "load_wide",
    "splat",
    "sqrt",
    "count_ones",
    "contains",
    "get",
    "len",
    "clone",
    "iter",
    "unwrap",
    "step_by",
    "rev",
    "from_mask",
    "a_very_long_identifier_that_keeps_going_and_going_and_going_and_going_and_going_and_going",
];

const LITERALS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "7",
    "255u8",
    "65535u16",
    "4294967295u32",
    "18446744073709551615u64",
    "18446744073709551615",
    "340282366920938463463374607431768211455u128",
    "99999999999999999999999999999999999999",
    "0x7f",
    "0xffff_ffffu32",
    "0b1010",
    "0o17",
    "1_000_000",
    "1usize",
    "1isize",
    "1i8",
    "1i64",
    "1f32",
    "0.0",
    "0.5",
    "1.5f32",
    "2.0f64",
    "1e3",
    "1e-45f32",
    "1e400",
    "3.4028235e38f32",
    "1.",
    "1e10f64",
    "\"text\"",
    "'c'",
    "b'a'",
    "b\"bytes\"",
    "true",
    "false",
    "1u1",
    "0xffu8",
];

const PUNCTS: &[&str] = &[
    "+", "-", "*", "/", "%", "^", "!", "&", "|", "&&", "||", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "^=", "&=",
    "|=", "<<=", ">>=", "=", "==", "!=", ">", "<", ">=", "<=", "@", ".", "..", "..=", ",", ";", ":", "::", "->", "=>",
    "#", "$", "?", "~", "'a",
];

/// Attribute arguments beyond the seeds' (never `debug`, which prints the C++ to stderr).
const EXTRA_ATTRS: &[&str] = &[
    "",
    "types(f32)",
    "types(f32, bf16, f16, f64)",
    "types(i32, u32, i64, u64)",
    "types(T = [f32], I = [u32])",
    "types(T = [f32, f64], U = [i32])",
    "types()",
    "types(u128)",
    "types(T = [])",
    "len(x == out)",
    "len(out >= n, x <= 4)",
    "len(x + y)",
    "len()",
    "lsa_barriers = 4",
    "lsa_barriers = grid",
    "gin_signals = 4294967295",
    "gin_signals = 99999999999",
    "gin_counters = grid, gin_contexts = 2",
    "ll_a2a_blocks = grid, ll_a2a_slots = 8",
    "launch_bounds(256)",
    "launch_bounds(1024, 2)",
    "launch_bounds(0)",
    "launch_bounds()",
    "launch_bounds(99999999999)",
    "fast",
    "types",
    "= 3",
    "types(f32), types(f64)",
];

impl Pools {
    pub(crate) fn new(seeds: Vec<Input>) -> Pools {
        let mut collect = Collect::default();
        let mut attrs: BTreeSet<String> = EXTRA_ATTRS.iter().map(|s| s.to_string()).collect();
        for seed in &seeds {
            attrs.insert(seed.attr.clone());
            if let Ok(item) = syn::parse_str::<syn::ItemFn>(&seed.item) {
                collect.visit_item_fn(&item);
            }
            if let Ok(tokens) = TokenStream::from_str(&seed.item) {
                collect_idents(tokens, &mut collect.idents);
            }
        }
        collect.idents.extend(EXTRA_IDENTS.iter().map(|s| s.to_string()));
        let list = |set: BTreeSet<String>| set.into_iter().collect::<Vec<_>>();
        Pools {
            seeds,
            idents: list(collect.idents),
            exprs: list(collect.exprs),
            types: list(collect.types),
            pats: list(collect.pats),
            stmts: list(collect.stmts),
            attrs: list(attrs).into_iter().filter(|a| !a.contains("debug")).collect(),
        }
    }

    /// A new input.
    pub(crate) fn generate(&self, rng: &mut Rng) -> Input {
        let seed = rng.pick(&self.seeds).clone();
        let kind = if rng.chance(70) { FnKind::Kernel } else { FnKind::DeviceFn };
        let mut input = Input { kind, ..seed };
        match rng.below(10) {
            0..=3 => {
                input.item = self.mutate_tree(&input.item, rng);
                if rng.chance(30) {
                    input.item = self.mutate_tokens(&input.item, rng);
                }
            }
            4..=6 => input.item = self.mutate_tokens(&input.item, rng),
            7 => input.attr = self.attribute(rng),
            8 => input.item = self.splice(&input.item, rng),
            _ => {
                input.item = if rng.chance(70) {
                    format!("fn fuzzed({}) {{ {} }}", self.soup(rng, 2), self.soup(rng, 3))
                } else {
                    self.soup(rng, 3)
                };
                input.attr = if rng.chance(50) { String::new() } else { self.soup(rng, 1) };
            }
        }
        if input.attr.contains("debug") {
            input.attr = input.attr.replace("debug", "debug_");
        }
        input
    }

    fn attribute(&self, rng: &mut Rng) -> String {
        let a = rng.pick(&self.attrs).clone();
        if rng.chance(40) {
            self.mutate_tokens(&a, rng)
        } else {
            a
        }
    }

    /// 1 to 4 token-level edits: delete, duplicate, replace an identifier, literal or punctuation, insert, wrap or
    /// unwrap a group, change its delimiter, swap neighbours.
    pub(crate) fn mutate_tokens(&self, text: &str, rng: &mut Rng) -> String {
        let Ok(tokens) = TokenStream::from_str(text) else { return text.to_string() };
        let mut trees: Vec<TokenTree> = tokens.into_iter().collect();
        for _ in 0..1 + rng.below(4) {
            let total = count(&trees);
            if total == 0 {
                trees = vec![self.random_tree(rng, 2)];
                continue;
            }
            let target = rng.below(total);
            let op = rng.below(10);
            let mut counter = 0;
            trees = edit(
                trees,
                target,
                &mut counter,
                &mut |tree, rng_trees| match op {
                    0 => Edit::Replace(Vec::new()),
                    1 => Edit::Replace(vec![tree.clone(), tree]),
                    2 => Edit::Replace(vec![match tree {
                        TokenTree::Ident(_) => self.ident_tree(rng_trees),
                        other => other,
                    }]),
                    3 => Edit::Replace(vec![match tree {
                        TokenTree::Literal(_) => one_tree(rng_trees.pick::<&str>(LITERALS)),
                        other => other,
                    }]),
                    4 => Edit::Replace(match tree {
                        TokenTree::Punct(_) => TokenStream::from_str(rng_trees.pick::<&str>(PUNCTS))
                            .map(|t| t.into_iter().collect())
                            .unwrap_or_default(),
                        other => vec![other],
                    }),
                    5 => Edit::Replace(vec![tree, self.random_tree(rng_trees, 2)]),
                    6 => {
                        let delimiter =
                            *rng_trees.pick(&[Delimiter::Parenthesis, Delimiter::Bracket, Delimiter::Brace]);
                        Edit::Replace(vec![TokenTree::Group(Group::new(delimiter, tree.into()))])
                    }
                    7 => Edit::Replace(match tree {
                        TokenTree::Group(g) => g.stream().into_iter().collect(),
                        other => vec![other],
                    }),
                    8 => Edit::Replace(vec![match tree {
                        TokenTree::Group(g) => {
                            let delimiter =
                                *rng_trees.pick(&[Delimiter::Parenthesis, Delimiter::Bracket, Delimiter::Brace]);
                            TokenTree::Group(Group::new(delimiter, g.stream()))
                        }
                        other => other,
                    }]),
                    _ => Edit::SwapWithNext,
                },
                rng,
            );
        }
        trees.into_iter().collect::<TokenStream>().to_string()
    }

    /// 1 to 3 syntax-tree edits: an expression, type, pattern or statement replaced by one from another kernel, a
    /// statement inserted or removed, a parameter added.
    pub(crate) fn mutate_tree(&self, text: &str, rng: &mut Rng) -> String {
        let Ok(mut item) = syn::parse_str::<syn::ItemFn>(text) else { return self.mutate_tokens(text, rng) };
        for _ in 0..1 + rng.below(3) {
            match rng.below(7) {
                0 | 1 => replace_nth::<syn::Expr>(&mut item, rng, &self.exprs),
                2 => replace_nth::<syn::Type>(&mut item, rng, &self.types),
                3 => replace_nth::<syn::Pat>(&mut item, rng, &self.pats),
                4 => {
                    if let Ok(stmt) = syn::parse_str::<syn::Stmt>(rng.pick::<String>(&self.stmts)) {
                        let at = rng.below(item.block.stmts.len() + 1);
                        item.block.stmts.insert(at, stmt);
                    }
                }
                5 => {
                    if !item.block.stmts.is_empty() {
                        let at = rng.below(item.block.stmts.len());
                        item.block.stmts.remove(at);
                    }
                }
                _ => {
                    let ty = rng.pick(&self.types).clone();
                    let name = rng.pick(&self.idents).clone();
                    if let Ok(arg) = syn::parse_str::<syn::FnArg>(&format!("{name}: {ty}")) {
                        let at = rng.below(item.sig.inputs.len() + 1);
                        item.sig.inputs.insert(at, arg);
                    }
                }
            }
        }
        item.to_token_stream().to_string()
    }

    /// The signature of one seed with the body of another.
    fn splice(&self, text: &str, rng: &mut Rng) -> String {
        let other = &rng.pick(&self.seeds).item;
        match (syn::parse_str::<syn::ItemFn>(text), syn::parse_str::<syn::ItemFn>(other)) {
            (Ok(mut a), Ok(b)) => {
                a.block = b.block;
                a.to_token_stream().to_string()
            }
            _ => text.to_string(),
        }
    }

    fn ident_tree(&self, rng: &mut Rng) -> TokenTree {
        one_tree(rng.pick::<String>(&self.idents))
    }

    fn random_tree(&self, rng: &mut Rng, depth: usize) -> TokenTree {
        match rng.below(if depth == 0 { 3 } else { 5 }) {
            0 => self.ident_tree(rng),
            1 => one_tree(rng.pick::<&str>(LITERALS)),
            2 => one_tree(rng.pick::<&str>(PUNCTS)),
            3 => {
                let delimiter = *rng.pick(&[Delimiter::Parenthesis, Delimiter::Bracket, Delimiter::Brace]);
                let inner: TokenStream = (0..rng.below(5)).map(|_| self.random_tree(rng, depth - 1)).collect();
                TokenTree::Group(Group::new(delimiter, inner))
            }
            _ => {
                // A snippet of real code: an expression or type from the seeds.
                let text =
                    if rng.chance(70) { rng.pick::<String>(&self.exprs) } else { rng.pick::<String>(&self.types) };
                TokenTree::Group(Group::new(Delimiter::None, TokenStream::from_str(text).unwrap_or_default()))
            }
        }
    }

    /// Random tokens.
    fn soup(&self, rng: &mut Rng, depth: usize) -> String {
        (0..rng.below(12)).map(|_| self.random_tree(rng, depth)).collect::<TokenStream>().to_string()
    }
}

/// The first token tree of `text` (an identifier when `text` does not lex).
fn one_tree(text: &str) -> TokenTree {
    TokenStream::from_str(text)
        .ok()
        .and_then(|t| t.into_iter().next())
        .unwrap_or_else(|| TokenTree::Ident(proc_macro2::Ident::new("fuzz", proc_macro2::Span::call_site())))
}

/// Token trees in `trees`, nested ones included.
pub(crate) fn count(trees: &[TokenTree]) -> usize {
    trees
        .iter()
        .map(|t| match t {
            TokenTree::Group(g) => 1 + count(&g.stream().into_iter().collect::<Vec<_>>()),
            _ => 1,
        })
        .sum()
}

pub(crate) enum Edit {
    Replace(Vec<TokenTree>),
    SwapWithNext,
}

/// Applies `f` to the `target`-th tree (pre-order).
pub(crate) fn edit(
    trees: Vec<TokenTree>,
    target: usize,
    counter: &mut usize,
    f: &mut dyn FnMut(TokenTree, &mut Rng) -> Edit,
    rng: &mut Rng,
) -> Vec<TokenTree> {
    let mut out: Vec<TokenTree> = Vec::with_capacity(trees.len());
    let mut swap_at = None;
    for tree in trees {
        let here = *counter;
        *counter += 1;
        if here == target {
            match f(tree.clone(), rng) {
                Edit::Replace(replacement) => out.extend(replacement),
                Edit::SwapWithNext => {
                    swap_at = Some(out.len());
                    out.push(tree);
                }
            }
            continue;
        }
        match tree {
            TokenTree::Group(g) if target > here && target < here + count(&[TokenTree::Group(g.clone())]) => {
                let inner = edit(g.stream().into_iter().collect(), target, counter, f, rng);
                out.push(TokenTree::Group(Group::new(g.delimiter(), inner.into_iter().collect())));
            }
            TokenTree::Group(g) => {
                *counter += count(&[TokenTree::Group(g.clone())]) - 1;
                out.push(TokenTree::Group(g));
            }
            other => out.push(other),
        }
    }
    if let Some(i) = swap_at {
        if i + 1 < out.len() {
            out.swap(i, i + 1);
        }
    }
    out
}

fn collect_idents(tokens: TokenStream, out: &mut BTreeSet<String>) {
    for tree in tokens {
        match tree {
            TokenTree::Ident(i) => {
                out.insert(i.to_string());
            }
            TokenTree::Group(g) => collect_idents(g.stream(), out),
            _ => {}
        }
    }
}

/// Expressions, types, patterns and statements of the seeds, as text.
#[derive(Default)]
struct Collect {
    idents: BTreeSet<String>,
    exprs: BTreeSet<String>,
    types: BTreeSet<String>,
    pats: BTreeSet<String>,
    stmts: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for Collect {
    fn visit_expr(&mut self, e: &'ast syn::Expr) {
        self.exprs.insert(e.to_token_stream().to_string());
        syn::visit::visit_expr(self, e);
    }
    fn visit_type(&mut self, t: &'ast syn::Type) {
        self.types.insert(t.to_token_stream().to_string());
        syn::visit::visit_type(self, t);
    }
    fn visit_pat(&mut self, p: &'ast syn::Pat) {
        self.pats.insert(p.to_token_stream().to_string());
        syn::visit::visit_pat(self, p);
    }
    fn visit_stmt(&mut self, s: &'ast syn::Stmt) {
        self.stmts.insert(s.to_token_stream().to_string());
        syn::visit::visit_stmt(self, s);
    }
}

/// A syntax node kind the tree mutation replaces.
trait Node: Sized + Clone {
    fn parse_text(text: &str) -> Option<Self>;
    fn count(item: &syn::ItemFn) -> usize;
    fn replace(item: &mut syn::ItemFn, target: usize, with: Self);
}

macro_rules! node {
    ($ty:ty, $parse:expr, $visit:ident, $visit_mut:ident) => {
        impl Node for $ty {
            fn parse_text(text: &str) -> Option<Self> {
                syn::parse::Parser::parse_str($parse, text).ok()
            }
            fn count(item: &syn::ItemFn) -> usize {
                struct Count(usize);
                impl<'ast> Visit<'ast> for Count {
                    fn $visit(&mut self, n: &'ast $ty) {
                        self.0 += 1;
                        syn::visit::$visit(self, n);
                    }
                }
                let mut c = Count(0);
                c.visit_item_fn(item);
                c.0
            }
            fn replace(item: &mut syn::ItemFn, target: usize, with: Self) {
                struct Replace {
                    target: usize,
                    seen: usize,
                    with: Option<$ty>,
                }
                impl VisitMut for Replace {
                    fn $visit_mut(&mut self, n: &mut $ty) {
                        let here = self.seen;
                        self.seen += 1;
                        if here == self.target {
                            if let Some(w) = self.with.take() {
                                *n = w;
                                return;
                            }
                        }
                        syn::visit_mut::$visit_mut(self, n);
                    }
                }
                Replace { target, seen: 0, with: Some(with) }.visit_item_fn_mut(item);
            }
        }
    };
}

node!(syn::Expr, <syn::Expr as syn::parse::Parse>::parse, visit_expr, visit_expr_mut);
node!(syn::Type, <syn::Type as syn::parse::Parse>::parse, visit_type, visit_type_mut);
node!(syn::Pat, syn::Pat::parse_multi_with_leading_vert, visit_pat, visit_pat_mut);

fn replace_nth<N: Node>(item: &mut syn::ItemFn, rng: &mut Rng, pool: &[String]) {
    let total = N::count(item);
    if total == 0 || pool.is_empty() {
        return;
    }
    if let Some(with) = N::parse_text(rng.pick::<String>(pool)) {
        N::replace(item, rng.below(total), with);
    }
}
