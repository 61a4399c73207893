//! Rejects, with a spanned error naming the replacement, every construct the translation does not support. All
//! problems of a body are reported, not just the first.

use syn::{Block, Expr, Item, Lit, Pat, Stmt};

use super::ctxt::Ctxt;
use super::lower::{is_screaming, VOCABULARY_CONSTANTS};
use super::types::MAX_TUPLE;

pub(crate) fn check_body(fn_name: &str, block: &Block, cx: &Ctxt) {
    let v = Validator { cx, fn_name };
    v.block(block);
}

struct Validator<'a> {
    cx: &'a Ctxt,
    fn_name: &'a str,
}

/// Where an expression sits: some constructs are only valid in one place.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Value,
    /// A direct argument of a call: `&x` / `&mut x` allowed (R13).
    Argument,
    /// The iterator of a `for` loop: ranges allowed.
    ForIterator,
    /// Under `&`: a range index makes a sub-slice.
    SubSlice,
}

fn is_compound_assignment(op: &syn::BinOp) -> bool {
    use syn::BinOp::*;
    matches!(
        op,
        AddAssign(_)
            | SubAssign(_)
            | MulAssign(_)
            | DivAssign(_)
            | RemAssign(_)
            | BitAndAssign(_)
            | BitOrAssign(_)
            | BitXorAssign(_)
            | ShlAssign(_)
            | ShrAssign(_)
    )
}

const ITERATOR_METHODS: &[&str] = &[
    "iter",
    "iter_mut",
    "into_iter",
    "map",
    "filter",
    "fold",
    "sum",
    "product",
    "collect",
    "enumerate",
    "zip",
    "for_each",
    "chain",
    "take",
    "skip",
    "windows",
    "chunks",
    "any",
    "all",
    "position",
    "find",
];

impl Validator<'_> {
    fn block(&self, b: &Block) {
        for s in &b.stmts {
            self.stmt(s);
        }
    }

    fn stmt(&self, s: &Stmt) {
        match s {
            Stmt::Local(l) => {
                if let Some((_, diverge)) = l.init.as_ref().and_then(|i| i.diverge.as_ref()) {
                    self.cx.error_spanned_by(
                        diverge,
                        "`let … else` is not supported in kernels: test the condition with `if` and `return`",
                    );
                    return;
                }
                self.let_pattern(&l.pat, true);
                if let Some(init) = &l.init {
                    self.expr(&init.expr, Place::Value);
                }
            }
            Stmt::Item(item) => match item {
                Item::Use(_) => {}
                other => self.cx.error_spanned_by(
                    other,
                    "items inside a kernel body are not supported: move it out of the function (helper functions \
                     are #[weft::device_fn]s)",
                ),
            },
            // A stray `;` (an empty statement, which Rust allows): nothing to check.
            Stmt::Expr(Expr::Verbatim(v), Some(_)) if v.is_empty() => {}
            Stmt::Expr(e, _) => self.expr(e, Place::Value),
            Stmt::Macro(m) => self.mac(&m.mac),
        }
    }

    /// A named field is a vocabulary type's (`Team`'s `nranks`, `rank`, `stride`: tuples' fields are numbered), and
    /// NCCL computes peers' addresses from a team's fields: a team with a field of one's own choosing would let
    /// `w.peer(team, p)` reach outside the window. Teams come from the vocabulary only.
    fn read_only_field(&self, place: &Expr) {
        let mut e = place;
        while let Expr::Paren(p) = e {
            e = &p.expr;
        }
        if let Expr::Field(f) = e {
            if let syn::Member::Named(name) = &f.member {
                self.cx.error_spanned_by(
                    place,
                    format!(
                        "`.{name}` cannot be changed in kernels: a team's fields are what NCCL computes peers' \
                         addresses from; make the team you need with the vocabulary (`dev.lsa()`, `dev.world()`, \
                         `team.inner_factor(n)`)"
                    ),
                );
            }
        }
    }

    fn mac(&self, mac: &syn::Macro) {
        let name = mac.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let advice = match name.as_str() {
            "panic" | "unreachable" | "todo" | "unimplemented" | "assert" | "assert_eq" | "assert_ne"
            | "debug_assert" | "debug_assert_eq" | "debug_assert_ne" => {
                "there is no panicking on the GPU: test the condition and `return` early (or record the failure in \
                 an output slice)"
            }
            "println" | "print" | "eprintln" | "eprint" | "format" | "write" | "writeln" | "dbg" => {
                "kernels cannot print: write the values to an output slice and print them on the host"
            }
            "vec" => "kernels cannot allocate: use `SharedArray<T, N>` or a slice parameter",
            _ => "macros are not supported in kernels: write the code out, or move it into a #[weft::device_fn]",
        };
        self.cx.error_spanned_by(mac, format!("`{name}!` is not supported in kernels: {advice}"));
    }

    fn expr(&self, e: &Expr, place: Place) {
        match e {
            Expr::Lit(l) => self.lit(&l.lit),
            Expr::Path(p) => self.path(p),
            Expr::Paren(p) => self.expr(&p.expr, if place == Place::ForIterator { place } else { Place::Value }),
            Expr::Group(g) => self.expr(&g.expr, place),
            Expr::Binary(b) => {
                if is_compound_assignment(&b.op) {
                    self.read_only_field(&b.left);
                }
                self.expr(&b.left, Place::Value);
                self.expr(&b.right, Place::Value);
            }
            Expr::Unary(u) => self.expr(&u.expr, Place::Value),
            Expr::Cast(c) => self.expr(&c.expr, Place::Value),
            Expr::Assign(a) => {
                if let Expr::Tuple(_) = &*a.left {
                    self.cx.error_spanned_by(
                        &a.left,
                        "destructuring assignment is not supported in kernels: assign each variable",
                    );
                }
                self.read_only_field(&a.left);
                self.expr(&a.left, Place::Value);
                self.expr(&a.right, Place::Value);
            }
            Expr::Call(c) => self.call(c),
            Expr::MethodCall(m) => {
                let name = m.method.to_string();
                if is_iterator_method(&name) {
                    // One error per chain (`x.iter().sum()`): on the outermost call, whose receiver is not visited.
                    for a in &m.args {
                        self.expr(a, Place::Argument);
                    }
                    self.cx.error_spanned_by(
                        &m.method,
                        format!(
                            "`.{name}()`: iterators are not supported in kernels: loop over indices \
                             (`for i in 0..s.len()`)"
                        ),
                    );
                    return;
                } else if is_option_method(&name) {
                    self.cx.error_spanned_by(
                        &m.method,
                        format!(
                            "`.{name}()`: kernels have no `Option`/`Result`: use a `bool` flag or a sentinel value"
                        ),
                    );
                } else if name == "to_string" || name == "to_owned" {
                    self.cx.error_spanned_by(&m.method, "kernels have no strings: pass numbers");
                } else if (name == "step_by" || name == "rev") && place != Place::ForIterator {
                    self.cx.error_spanned_by(
                        &m.method,
                        format!("`.{name}()` is only supported on the range of a `for` loop"),
                    );
                    return;
                }
                let receiver_place = if place == Place::ForIterator { Place::ForIterator } else { Place::Value };
                self.expr(&m.receiver, receiver_place);
                for a in &m.args {
                    self.expr(a, Place::Argument);
                }
            }
            Expr::Index(i) => {
                if let Expr::Range(r) = &*i.index {
                    if place != Place::SubSlice {
                        self.cx.error_spanned_by(
                            &i.index,
                            "a range index is a sub-slice: write `&x[a..b]` (or `&mut x[a..b]`)",
                        );
                    } else if matches!(r.limits, syn::RangeLimits::Closed(_)) {
                        self.cx.error_spanned_by(&i.index, "write the sub-slice with an exclusive end: `&x[a..b + 1]`");
                    }
                    for bound in r.start.iter().chain(r.end.iter()) {
                        self.expr(bound, Place::Value);
                    }
                } else {
                    self.expr(&i.index, Place::Value);
                }
                self.expr(&i.expr, Place::Value);
            }
            Expr::Field(f) => self.expr(&f.base, Place::Value),
            Expr::Tuple(t) => {
                if t.elems.len() > MAX_TUPLE {
                    self.cx.error_spanned_by(t, format!("tuples in kernels have at most {MAX_TUPLE} elements"));
                }
                for e in &t.elems {
                    self.expr(e, Place::Value);
                }
            }
            Expr::Block(b) => {
                if let Some(l) = &b.label {
                    self.cx
                        .error_spanned_by(l, "labeled blocks are not supported in kernels: use a `loop` with `break`");
                }
                self.block(&b.block);
            }
            Expr::If(i) => {
                self.condition(&i.cond);
                self.block(&i.then_branch);
                if let Some((_, e)) = &i.else_branch {
                    self.expr(e, Place::Value);
                }
            }
            Expr::While(w) => {
                self.condition(&w.cond);
                self.block(&w.body);
            }
            Expr::Loop(l) => self.block(&l.body),
            Expr::ForLoop(f) => {
                match &*f.pat {
                    Pat::Ident(pi) if pi.subpat.is_none() && pi.by_ref.is_none() => {}
                    Pat::Wild(_) => {}
                    other => self.cx.error_spanned_by(other, "the loop variable must be a plain name (`for i in …`)"),
                }
                if !is_supported_iteration(&f.expr) {
                    self.cx.error_spanned_by(
                        &f.expr,
                        "`for` loops in kernels iterate over a range (`0..n`, `a..=b`, `(a..b).step_by(s)`, \
                         `(a..b).rev()`) or `grid_stride(n)`: index slices instead of iterating them",
                    );
                } else {
                    self.expr(&f.expr, Place::ForIterator);
                }
                self.block(&f.body);
            }
            Expr::Break(b) => {
                if let Some(v) = &b.expr {
                    self.cx.error_spanned_by(
                        v,
                        "`break` with a value is not supported in kernels: assign to a `let mut` declared before the \
                         loop, then `break`",
                    );
                }
            }
            Expr::Continue(_) => {}
            Expr::Return(r) => {
                if let Some(v) = &r.expr {
                    self.expr(v, Place::Value);
                }
            }
            Expr::Match(m) => {
                self.expr(&m.expr, Place::Value);
                for arm in &m.arms {
                    self.match_pattern(&arm.pat, true);
                    if let Some((_, g)) = &arm.guard {
                        self.expr(g, Place::Value);
                    }
                    self.expr(&arm.body, Place::Value);
                }
            }
            Expr::Reference(r) if matches!(&*r.expr, Expr::Index(i) if matches!(&*i.index, Expr::Range(_))) => {
                // `&x[a..b]`: a sub-slice, a value in C++ (`x.subslice(a, b)`).
                self.expr(&r.expr, Place::SubSlice);
            }
            Expr::Reference(r) => {
                if r.mutability.is_some() {
                    self.read_only_field(&r.expr);
                }
                if place != Place::Argument {
                    self.cx.error_spanned_by(
                        r,
                        "references can only be passed to functions in kernels (`atomic_add(&mut x[i], v, …)`): \
                         bind the value itself",
                    );
                }
                self.expr(&r.expr, Place::Value);
            }
            Expr::Range(r) => {
                if place != Place::ForIterator {
                    self.cx.error_spanned_by(r, "ranges are only supported as the iterator of a `for` loop");
                }
                if let Some(s) = &r.start {
                    self.expr(s, Place::Value);
                }
                if let Some(e) = &r.end {
                    self.expr(e, Place::Value);
                }
            }
            Expr::Closure(c) => self
                .cx
                .error_spanned_by(c, "closures are not supported in kernels: write the helper as a #[weft::device_fn]"),
            Expr::Async(a) => self.cx.error_spanned_by(a, "`async` is not supported in kernels: remove it"),
            Expr::Await(a) => self.cx.error_spanned_by(a, "`.await` is not supported in kernels: remove it"),
            Expr::Unsafe(u) => self
                .cx
                .error_spanned_by(u, "`unsafe` is not supported in kernels: the vocabulary is safe, remove the block"),
            Expr::Macro(m) => self.mac(&m.mac),
            Expr::Array(a) => self.cx.error_spanned_by(
                a,
                "arrays are not supported in kernels: use `SharedArray<T, N>` for per-block scratch, a slice \
                 parameter, or separate locals",
            ),
            Expr::Repeat(r) => self.cx.error_spanned_by(
                r,
                "arrays are not supported in kernels: use `SharedArray<T, N>` for per-block scratch, a slice \
                 parameter, or separate locals",
            ),
            Expr::Struct(s) => self.cx.error_spanned_by(
                s,
                "struct literals are not supported in kernels: use separate locals, or the vocabulary's \
                 constructors",
            ),
            Expr::Try(t) => self.cx.error_spanned_by(
                t,
                "`?` is not supported in kernels (no `Option`/`Result` on the GPU): test the condition and `return`",
            ),
            Expr::TryBlock(t) => self.cx.error_spanned_by(t, "`try` blocks are not supported in kernels"),
            Expr::Yield(y) => self.cx.error_spanned_by(y, "`yield` is not supported in kernels"),
            Expr::Let(l) => self.cx.error_spanned_by(
                l,
                "`if let` / `while let` are not supported in kernels: compare explicitly (`if x == …`) or `match`",
            ),
            Expr::Const(c) => {
                self.cx.error_spanned_by(c, "`const` blocks are not supported in kernels: write the value")
            }
            Expr::RawAddr(r) => self.cx.error_spanned_by(r, "raw pointers are not supported in kernels"),
            Expr::Infer(i) => self.cx.error_spanned_by(i, "`_` is not a value: write the expression"),
            other => self.cx.error_spanned_by(other, "this expression is not supported in kernels"),
        }
    }

    fn condition(&self, cond: &Expr) {
        self.expr(cond, Place::Value);
    }

    fn lit(&self, lit: &Lit) {
        match lit {
            Lit::Int(_) | Lit::Float(_) | Lit::Bool(_) => {}
            Lit::Str(_) | Lit::ByteStr(_) | Lit::CStr(_) => {
                self.cx.error_spanned_by(lit, "kernels have no strings: pass numbers")
            }
            Lit::Char(_) | Lit::Byte(_) => {
                self.cx.error_spanned_by(lit, "kernels have no characters: write the number (`b'a'` is `97u8`)")
            }
            other => self.cx.error_spanned_by(other, "this literal is not supported in kernels"),
        }
    }

    fn path(&self, p: &syn::ExprPath) {
        if let Some(message) = path_problem(p) {
            self.cx.error_spanned_by(p, message);
        }
    }

    fn call(&self, c: &syn::ExprCall) {
        if let Some(message) = call_problem(c, self.fn_name) {
            self.cx.error_spanned_by(&c.func, message);
        }
        for a in &c.args {
            self.expr(a, Place::Argument);
        }
    }

    fn let_pattern(&self, p: &Pat, top: bool) {
        match p {
            Pat::Ident(pi) => {
                if let Some(r) = &pi.by_ref {
                    self.cx.error_spanned_by(r, "`ref` bindings are not supported in kernels: bind the value");
                }
                if let Some((_, sub)) = &pi.subpat {
                    self.cx.error_spanned_by(sub, "`@` patterns are not supported in kernels: bind a plain name");
                }
            }
            Pat::Wild(_) => {}
            Pat::Tuple(t) => {
                for e in &t.elems {
                    self.let_pattern(e, false);
                }
            }
            Pat::Type(pt) if top => self.let_pattern(&pt.pat, false),
            Pat::Paren(pp) => self.let_pattern(&pp.pat, top),
            other => self.cx.error_spanned_by(
                other,
                "this pattern is not supported in a kernel `let`: bind a name or a tuple of names (`let (a, b) = …`)",
            ),
        }
    }

    fn match_pattern(&self, p: &Pat, top: bool) {
        match p {
            Pat::Wild(_) | Pat::Lit(_) | Pat::Range(_) => {}
            Pat::Path(pp) => {
                if pp.qself.is_some() {
                    self.cx.error_spanned_by(pp, "qualified paths are not supported in kernel patterns");
                }
            }
            Pat::Ident(pi) => {
                if !top {
                    self.cx.error_spanned_by(
                        pi,
                        "bindings inside `|` patterns are not supported in kernels: bind the whole value in its own arm",
                    );
                }
                if let Some((_, sub)) = &pi.subpat {
                    self.cx.error_spanned_by(sub, "`@` patterns are not supported in kernels: test with a guard");
                }
                if let Some(r) = &pi.by_ref {
                    self.cx.error_spanned_by(r, "`ref` bindings are not supported in kernels");
                }
            }
            Pat::Or(o) => {
                for case in &o.cases {
                    self.match_pattern(case, false);
                }
            }
            Pat::Paren(pp) => self.match_pattern(&pp.pat, top),
            other => self.cx.error_spanned_by(
                other,
                "this pattern is not supported in kernels: match numbers, ranges or enum values (`Order::Release`), or \
                 use `if`/`else`",
            ),
        }
    }
}

/// `.iter()`, `.sum()`, …: rejected on the outermost call of a chain, whose receiver is not looked at.
pub(crate) fn is_iterator_method(name: &str) -> bool {
    ITERATOR_METHODS.contains(&name)
}

fn is_option_method(name: &str) -> bool {
    matches!(name, "unwrap" | "expect" | "unwrap_or" | "ok" | "is_some" | "is_none")
}

/// Whether validation reports the method call `.name()` itself (the lowering then says nothing more about it).
/// `step_by`/`rev` only reach the lowering as method calls outside a `for` loop's range, where they are rejected.
pub(crate) fn rejects_method(name: &str) -> bool {
    is_iterator_method(name) || is_option_method(name) || matches!(name, "to_string" | "to_owned" | "step_by" | "rev")
}

/// The float constants kernels may name (`f32::INFINITY`, …): their C++ is in `lower::expr`.
pub(crate) const FLOAT_CONSTANTS: &[&str] =
    &["INFINITY", "NEG_INFINITY", "NAN", "MAX", "MIN", "EPSILON", "MIN_POSITIVE"];

/// Why a path in a kernel body is rejected, if it is (validation reports it; the lowering skips it).
pub(crate) fn path_problem(p: &syn::ExprPath) -> Option<String> {
    if p.qself.is_some() {
        return Some("qualified paths (`<T as Trait>::f`) are not supported in kernels".into());
    }
    let names: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    let last = names.last()?;
    if names.first().is_some_and(|f| f == "std" || f == "core" || f == "alloc") {
        return Some("the standard library is not available in kernels: use the vocabulary (`weft::device`)".into());
    }
    if names.len() >= 2 {
        let prev = &names[names.len() - 2];
        let scalar = super::types::Scalar::from_name(prev);
        let is_type =
            scalar.is_some() || prev.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !is_screaming(prev);
        if is_type && is_screaming(last) {
            let allowed = match scalar {
                Some(s) if s.is_integer() => matches!(last.as_str(), "MAX" | "MIN" | "BITS"),
                Some(super::types::Scalar::F32 | super::types::Scalar::F64) => FLOAT_CONSTANTS.contains(&last.as_str()),
                _ => false,
            };
            if allowed && names.len() == 2 {
                return None;
            }
            return Some(format!(
                "associated constants (`{prev}::{last}`) are not available in kernels: write the value as a literal \
                 (kernels know the integer types' `MIN`, `MAX`, `BITS` and `f32`/`f64`'s {})",
                FLOAT_CONSTANTS.iter().map(|c| format!("`{c}`")).collect::<Vec<_>>().join(", ")
            ));
        }
    }
    if is_screaming(last) && !VOCABULARY_CONSTANTS.contains(&last.as_str()) {
        return Some(format!(
            "kernels cannot read Rust constants or statics (`{last}`): the macro cannot see their values; write the \
             value as a literal or pass it as a parameter"
        ));
    }
    None
}

/// Why a call in a kernel body is rejected, if it is (spanned on the called expression).
pub(crate) fn call_problem(c: &syn::ExprCall, fn_name: &str) -> Option<String> {
    let Expr::Path(p) = &*c.func else {
        return Some(
            "only named functions can be called in kernels: vocabulary functions, #[weft::device_fn]s and \
             vocabulary constructors"
                .into(),
        );
    };
    let names: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
    let joined = names.join("::");
    let host = match names.last().map(String::as_str) {
        Some("Some" | "None" | "Ok" | "Err") => {
            Some("kernels have no `Option`/`Result`: use a `bool` flag or a sentinel value")
        }
        _ => None,
    };
    let host = host.or(match names.first().map(String::as_str) {
        Some("Vec" | "Box" | "String" | "Rc" | "Arc" | "HashMap") => {
            Some("kernels cannot allocate: use `SharedArray<T, N>` or a slice parameter")
        }
        _ => None,
    });
    if let Some(advice) = host {
        return Some(format!("`{joined}` cannot be used in a kernel: {advice}"));
    }
    if names.len() == 1 && names[0] == fn_name {
        return Some("recursion is not supported in kernels and device fns: write it as a loop".into());
    }
    path_problem(p)
}

fn strip_paren(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_paren(&p.expr),
        Expr::Group(g) => strip_paren(&g.expr),
        other => other,
    }
}

fn is_supported_iteration(e: &Expr) -> bool {
    match strip_paren(e) {
        Expr::Range(r) => r.start.is_some() && r.end.is_some(),
        Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => {
            matches!(strip_paren(&m.receiver), Expr::Range(r) if r.start.is_some() && r.end.is_some())
        }
        Expr::MethodCall(m) if m.method == "rev" && m.args.is_empty() => {
            matches!(strip_paren(&m.receiver), Expr::Range(r) if r.start.is_some() && r.end.is_some() && matches!(r.limits, syn::RangeLimits::HalfOpen(_)))
        }
        Expr::Call(c) if c.args.len() == 1 => {
            matches!(&*c.func, Expr::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "grid_stride"))
        }
        _ => false,
    }
}
