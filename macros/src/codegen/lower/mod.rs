//! Rust body → C++ body. Runs after `valid` and assumes its checks: anything `valid` rejected is skipped here
//! without a second error. What only this pass can see (types of literals, resource indices) it reports itself.

pub(crate) mod bounds;
mod calls;
mod code;
mod expr;
mod infer;
pub(crate) mod known;
mod loops;
mod matching;
mod method_calls;
pub(crate) mod methods;
mod names;
mod paths;
mod stmt;

use std::collections::HashSet;

use proc_macro2::Span;
use syn::visit::Visit;

use super::ast::{FnKind, ParamKind, Signature};
use super::attr::Attributes;
use super::bounds::{Bounds, Decision};
use super::ctxt::Ctxt;
use super::types::{Ty, TypeMapper};
use super::usage::{IndexValue, Usage};
pub(crate) use code::{Code, Resolver};
pub(crate) use expr::{is_screaming, VOCABULARY_CONSTANTS};
use infer::{Origin, Vars};
pub(crate) use known::is_vocabulary_function;
pub(crate) use names::cpp_ident;

/// What lowering a body produced.
pub(crate) struct LoweredBody {
    /// The body's statements, indented by one level, one per line.
    pub(crate) text: String,
    /// C++ names of the parameters, in order.
    pub(crate) param_names: Vec<String>,
    pub(crate) usage: Usage,
    /// Paths (as the kernel's generated module must write them) of every free function the body calls; each has a
    /// companion module with the C++ source of device fns (empty for vocabulary functions).
    pub(crate) calls: Vec<syn::Path>,
    /// The body's memory accesses and how each is kept in bounds.
    pub(crate) bounds: Bounds,
    /// Resource indices checked on the device against their declared count.
    pub(crate) resource_checks: Vec<ResourceCheck>,
}

/// A resource index the macro cannot follow (`dev.lsa_barrier(Cta, i)` with `#[kernel(lsa_barriers = 8)]`): checked
/// on the device against the declared count, in the form `launch` runs.
#[derive(Debug, Clone)]
pub(crate) struct ResourceCheck {
    /// What it indexes ("LSA barriers").
    pub(crate) what: &'static str,
    /// The index as written.
    pub(crate) access: String,
    pub(crate) line: u32,
    /// The index's tokens, for errors spanned on it.
    pub(crate) tokens: proc_macro2::TokenStream,
}

/// Options of the C++ writer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// End each statement with `// line N` (the Rust line it came from) when the line is known.
    pub(crate) line_comments: bool,
}

pub(crate) struct Line {
    indent: usize,
    code: Code,
    line: usize,
}

#[derive(Debug, Clone)]
struct Local {
    rust: String,
    cpp: String,
    ty: Ty,
    /// For immutable integer locals: what a resource index through them means.
    index: IndexValue,
    decl: Origin,
    /// `let mut`.
    mutable: bool,
    /// What the bounds analysis knows of its value where the lowering is.
    shape: bounds::Shape,
}

/// Why a `let`'s C++ type hangs on a type variable, for the error if it stays unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LetVarReason {
    /// `let x = 0;`
    Literal,
    /// `let x = if c { v } else { return; };`
    Branches,
}

struct LoopFrame {
    label: Option<String>,
    /// `Some(label)`: `continue` must jump to this label (inclusive ranges check their end after the body).
    continue_goto: Option<String>,
    continue_label: Option<String>,
    break_label: Option<String>,
    continue_label_used: bool,
    break_label_used: bool,
}

pub(crate) struct Lowerer<'a> {
    cx: &'a Ctxt,
    sig: &'a Signature,
    attrs: &'a Attributes,
    options: Options,
    lines: Vec<Line>,
    indent: usize,
    locals: Vec<Local>,
    scopes: Vec<(usize, Vec<usize>)>,
    next_scope: usize,
    seq: usize,
    vars: Vars,
    used_names: HashSet<String>,
    loops: Vec<LoopFrame>,
    usage: Usage,
    calls: Vec<syn::Path>,
    let_vars: Vec<(usize, Span, String, LetVarReason)>,
    /// Locals of unknown type already reported as a method's receiver.
    untyped_reported: HashSet<usize>,
    bounds: Bounds,
    /// The conditions around the code being lowered.
    guards: Vec<bounds::Guard>,
    /// Locals narrowed by those conditions, innermost last.
    overrides: Vec<(usize, bounds::Shape)>,
    /// `w.lsa(peer)` sites in a function without a `DevComm` parameter, and where they are written.
    lsa_without_dev: Vec<(super::bounds::SiteId, Span)>,
    resource_checks: Vec<ResourceCheck>,
}

/// Lowers `body` of a function with signature `sig`.
pub(crate) fn lower_body(
    sig: &Signature,
    item: &syn::ItemFn,
    attrs: &Attributes,
    options: Options,
    cx: &Ctxt,
) -> LoweredBody {
    let mut idents = IdentCollector::default();
    idents.visit_block(&item.block);
    // The C++ names of every identifier in the body, so a binding renamed for shadowing (`rs_n_1`) never takes a
    // name the body uses; the function's and its type parameters' names are never a local's.
    let mut used_names: HashSet<String> = idents.0.iter().map(|i| cpp_ident(i)).collect();
    used_names.insert(sig.cpp_name());
    for e in &sig.elements {
        used_names.insert(cpp_ident(&e.ident.to_string()));
    }
    for c in &sig.generic_names.coops {
        used_names.insert(cpp_ident(c));
    }
    let mut l = Lowerer {
        cx,
        sig,
        attrs,
        options,
        lines: Vec::new(),
        indent: 1,
        locals: Vec::new(),
        scopes: vec![(0, Vec::new())],
        next_scope: 1,
        seq: 0,
        vars: Vars::default(),
        used_names,
        loops: Vec::new(),
        usage: Usage::default(),
        calls: Vec::new(),
        let_vars: Vec::new(),
        untyped_reported: HashSet::new(),
        bounds: Bounds::default(),
        guards: Vec::new(),
        overrides: Vec::new(),
        lsa_without_dev: Vec::new(),
        resource_checks: Vec::new(),
    };
    let mut param_names = Vec::new();
    for p in &sig.params {
        let rust = p.ident.to_string();
        let cpp = cpp_ident(&rust);
        l.used_names.insert(cpp.clone());
        if let ParamKind::DevComm { .. } = p.kind {
            if sig.kind == FnKind::Kernel {
                // R1: the entry point takes NCCL's struct; the body wraps it.
                let raw = l.temp_name(&format!("{}_raw", rust.trim_start_matches("r#")));
                param_names.push(raw.clone());
                l.emit(Code::text(format!("weft::DevComm {cpp}{{{raw}}};")), 0);
                l.declare_named(&rust, cpp, Ty::DevComm, IndexValue::Unknown);
                continue;
            }
        }
        param_names.push(cpp.clone());
        l.declare_named(&rust, cpp, p.ty.clone(), IndexValue::Unknown);
    }
    l.param_shapes();
    let ret = sig.ret_ty.clone();
    l.lower_fn_block(&item.block, &ret);
    l.check_let_vars();
    l.finish_bounds();
    let text = l.render();
    LoweredBody {
        text,
        param_names,
        usage: l.usage,
        calls: l.calls,
        bounds: l.bounds,
        resource_checks: l.resource_checks,
    }
}

impl<'a> Lowerer<'a> {
    fn mapper(&self) -> TypeMapper<'_> {
        TypeMapper { generics: &self.sig.generic_names, cx: self.cx }
    }

    fn origin(&self) -> Origin {
        Origin { seq: self.seq, scopes: self.scopes.iter().map(|(id, _)| *id).collect() }
    }

    fn emit(&mut self, code: Code, line: usize) {
        self.lines.push(Line { indent: self.indent, code, line });
    }

    fn emit_text(&mut self, text: impl Into<String>) {
        self.lines.push(Line { indent: self.indent, code: Code::text(text), line: 0 });
    }

    fn push_scope(&mut self) {
        let id = self.next_scope;
        self.next_scope += 1;
        self.scopes.push((id, Vec::new()));
    }

    fn pop_scope(&mut self) {
        self.scopes.pop();
    }

    /// A C++ name for a new binding of `rust`: its own name unless that would shadow or collide in C++.
    fn fresh_name(&mut self, rust: &str) -> String {
        let base = cpp_ident(rust);
        let visible = |name: &str, l: &Lowerer<'_>| {
            l.scopes.iter().any(|(_, ids)| ids.iter().any(|id| l.locals[*id].cpp == name))
        };
        let reserved = |name: &str, l: &Lowerer<'_>| {
            l.sig.cpp_name() == name
                || l.sig.elements.iter().any(|e| cpp_ident(&e.ident.to_string()) == name)
                || l.sig.generic_names.coops.iter().any(|c| cpp_ident(c) == name)
        };
        if !visible(&base, self) && !reserved(&base, self) {
            self.used_names.insert(base.clone());
            return base;
        }
        let mut n = 1;
        loop {
            let candidate = format!("{base}_{n}");
            if !self.used_names.contains(&candidate) {
                self.used_names.insert(candidate.clone());
                return candidate;
            }
            n += 1;
        }
    }

    /// A fresh name for a temporary the translation introduces: `w_<hint>` (names::TEMP), never a user's.
    fn temp_name(&mut self, hint: &str) -> String {
        let hint = format!("{}{hint}", names::TEMP);
        let mut n = 0;
        loop {
            let candidate = if n == 0 { hint.clone() } else { format!("{hint}_{n}") };
            if !self.used_names.contains(&candidate) {
                self.used_names.insert(candidate.clone());
                return candidate;
            }
            n += 1;
        }
    }

    fn declare_named(&mut self, rust: &str, cpp: String, ty: Ty, index: IndexValue) -> usize {
        self.seq += 1;
        let decl = self.origin();
        let id = self.locals.len();
        self.locals.push(Local {
            rust: rust.to_string(),
            cpp,
            ty,
            index,
            decl,
            mutable: false,
            shape: bounds::Shape::None,
        });
        if let Some((_, ids)) = self.scopes.last_mut() {
            ids.push(id);
        }
        self.seq += 1;
        id
    }

    fn lookup(&self, rust: &str) -> Option<usize> {
        self.scopes.iter().rev().flat_map(|(_, ids)| ids.iter().rev()).copied().find(|id| self.locals[*id].rust == rust)
    }

    /// Makes `a` and `b` the same type where one of them is a literal's variable.
    fn unify(&mut self, a: &Ty, b: &Ty) {
        match (a, b) {
            (Ty::Var(x), Ty::Var(y)) => self.vars.union(*x, *y),
            (Ty::Var(v), other) | (other, Ty::Var(v)) => self.bind_var(*v, other.clone()),
            (Ty::Tuple(xs), Ty::Tuple(ys)) if xs.len() == ys.len() => {
                for (x, y) in xs.iter().zip(ys) {
                    self.unify(x, y);
                }
            }
            (Ty::Ref(x), y) | (y, Ty::Ref(x)) => {
                let x = (**x).clone();
                self.unify(&x, y)
            }
            _ => {}
        }
    }

    fn bind_var(&mut self, v: usize, ty: Ty) {
        match ty {
            Ty::Scalar(_) | Ty::Param(_) => self.vars.bind(v, ty, |_| true),
            Ty::Local(id) => {
                let decl = self.locals[id].decl.clone();
                self.vars.bind(v, ty, |origin| origin.sees(&decl))
            }
            Ty::Unknown | Ty::Vocab(..) => self.vars.escape(v),
            // Already reported: the literal's type no longer matters, and must not draw a second error.
            Ty::Error => self.vars.bind(v, Ty::Error, |_| true),
            _ => {}
        }
    }

    /// Marks every literal variable in `ty` as having met something the lowering cannot type.
    fn escape(&mut self, ty: &Ty) {
        match ty {
            Ty::Var(v) => self.vars.escape(*v),
            Ty::Tuple(xs) => xs.iter().for_each(|x| self.escape(x)),
            _ => {}
        }
    }

    fn check_let_vars(&mut self) {
        for (v, span, name, reason) in std::mem::take(&mut self.let_vars) {
            if self.vars.binding(v).is_some() || !self.vars.escaped(v) {
                continue;
            }
            let message = match reason {
                LetVarReason::Literal => {
                    let example = if self.vars.is_float(v) { "f32 = 0.0" } else { "u32 = 0" };
                    format!(
                        "cannot tell the C++ type of `{name}`: its initial value is an untyped literal and it is used \
                         with vocabulary whose types the macro does not see; annotate it (`let {name}: {example};`) \
                         or give the literal a suffix (`0.0f32`, `0u32`)"
                    )
                }
                LetVarReason::Branches => format!(
                    "cannot tell the C++ type of `{name}`: a branch of its value leaves (`return`, `break`, …) and the \
                     others have types the macro does not see; annotate it (`let {name}: T = …;`)"
                ),
            };
            self.cx.error_at(span, message);
        }
    }

    /// Decides every access once literal types are known, and notes whether any is checked on the device.
    fn finish_bounds(&mut self) {
        let vars = &self.vars;
        self.bounds.finish(|v| match vars.binding(v) {
            Some(Ty::Scalar(s)) => super::bounds::unsigned_bits(s),
            // An unsuffixed integer literal nothing typed is an `i32` (Rust's fallback, and the C++ spelling).
            _ => None,
        });
        let on_device: Vec<usize> =
            (0..self.bounds.sites.len()).filter(|&i| self.bounds.decision(i) == Decision::OnDevice).collect();
        self.usage.device_checks |= !on_device.is_empty();
        self.check_peer_sites(&on_device);
        if self.attrs.no_device_checks && self.sig.kind == FnKind::Kernel {
            for check in &self.resource_checks {
                self.cx.error_spanned_by(
                    &check.tokens,
                    format!(
                        "`{}` would be checked on the device against the number of {}, which \
                         #[kernel(no_device_checks)] forbids: use a constant or `block_idx_x()` (whose count \
                         `requirements(&cfg)` sizes), or drop `no_device_checks` (docs/macro.md, \"Bounds\")",
                        check.access, check.what
                    ),
                );
            }
            for &i in &on_device {
                let site = &self.bounds.sites[i];
                self.cx.error_spanned_by(
                    &site.tokens,
                    format!(
                        "`{}` would be checked on the device, which #[kernel(no_device_checks)] forbids: {}; index \
                         it with a loop variable over a parameter (`for i in grid_stride(n)`), narrow it where it is \
                         used (`if i < x.len()`), or drop `no_device_checks` (docs/macro.md, \"Bounds\")",
                        site.access,
                        self.bounds.why_unproven(site)
                    ),
                );
            }
        }
    }

    fn render(&self) -> String {
        let names: Vec<String> = self.locals.iter().map(|l| l.cpp.clone()).collect();
        let resolver = Resolver { vars: &self.vars, local_names: &names, bounds: &self.bounds };
        let mut out = String::new();
        let mut last_line = 0;
        for line in &self.lines {
            for _ in 0..line.indent {
                out.push_str("    ");
            }
            let text = line.code.render(&resolver);
            out.push_str(&text);
            // Only where the Rust line changes: one comment per source line, not per generated line.
            if self.options.line_comments && line.line > 0 && line.line != last_line {
                out.push_str(&format!("  // line {}", line.line));
                last_line = line.line;
            }
            out.push('\n');
        }
        out
    }
}

/// Every identifier in the body.
#[derive(Default)]
struct IdentCollector(HashSet<String>);

impl<'ast> Visit<'ast> for IdentCollector {
    fn visit_ident(&mut self, i: &'ast proc_macro2::Ident) {
        self.0.insert(i.to_string());
    }
}

/// The Rust source line of a node, 0 when unknown.
fn line_of<T: syn::spanned::Spanned>(node: &T) -> usize {
    node.span().start().line
}
