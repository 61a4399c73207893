//! `match`: an `if` chain as a statement, a chain of `?:` as a value.

use syn::{Expr, Pat};

use super::code::Code;
use super::expr::{is_camel, is_screaming, Val};
use super::stmt::Sink;
use super::{line_of, Lowerer};
use crate::codegen::types::{Scalar, Ty};
use crate::codegen::usage::IndexValue;

impl Lowerer<'_> {
    pub(crate) fn match_stmt(&mut self, m: &syn::ExprMatch, sink: &Sink) {
        let line = line_of(&m.expr);
        let (name, ty, wrapped) = self.scrutinee(&m.expr, line);
        let n = m.arms.len();
        let mut opened = false;
        for (i, arm) in m.arms.iter().enumerate() {
            self.push_scope();
            let (cond, bindings) = self.pattern(&arm.pat, &name, &ty);
            let guard = arm.guard.as_ref().map(|(_, g)| self.expr_expect(g, &Ty::Scalar(Scalar::Bool)));
            let cond = match (cond, guard) {
                (None, None) => None,
                (Some(c), None) => Some(c),
                (None, Some(g)) => Some(g.code),
                (Some(c), Some(g)) => {
                    let mut out = c;
                    out.push_str(" && ").push(g.operand());
                    Some(out)
                }
            };
            let last = i + 1 == n;
            let head = match (&cond, opened, last) {
                (Some(c), false, _) => {
                    let mut h = Code::text("if (");
                    h.push(c.clone()).push_str(") {");
                    h
                }
                (Some(c), true, false) => {
                    let mut h = Code::text("} else if (");
                    h.push(c.clone()).push_str(") {");
                    h
                }
                // The last arm of an exhaustive match needs no test.
                (_, true, true) => Code::text("} else {"),
                (None, false, _) => Code::text("{"),
                (None, true, false) => Code::text("} else {"),
            };
            // An arm that always matches ends the chain (later arms are unreachable; rustc warns about them).
            let unconditional = cond.is_none();
            self.emit(head, line_of(&arm.pat));
            opened = true;
            self.indent += 1;
            for (rust, mutable) in bindings {
                if mutable {
                    let fresh = self.fresh_name(&rust);
                    self.emit(Code::text(format!("auto {fresh} = {name};")), 0);
                    self.declare_named(&rust, fresh, ty.clone(), IndexValue::Unknown);
                }
            }
            // The bounds analysis does not follow patterns: an arm runs for some values of the scrutinee.
            let arm_guard = self.arm_guard(&m.expr, arm);
            let depth = self.enter_guards(vec![arm_guard], Vec::new());
            match &*arm.body {
                Expr::Block(b) if b.label.is_none() => {
                    self.push_scope();
                    self.block_stmts(&b.block, sink);
                    self.pop_scope();
                }
                other => self.tail(other, sink),
            }
            self.leave_guards(depth);
            self.indent -= 1;
            self.pop_scope();
            if unconditional {
                break;
            }
        }
        if opened {
            self.emit_text("}");
        }
        self.forget_assigned_in(&Expr::Match(m.clone()));
        if wrapped {
            self.indent -= 1;
            self.emit_text("}");
        }
    }

    /// `match` in value position: a chain of `?:`.
    pub(crate) fn match_value(&mut self, m: &syn::ExprMatch) -> Val {
        let mut temp_line = None;
        let (name, ty) = match self.simple_local(&m.expr) {
            Some((n, t)) => (n, t),
            None => {
                let v = self.expr(&m.expr);
                let temp = self.temp_name("matched");
                let mut decl = Code::text(format!("auto {temp} = "));
                decl.push(v.code).push_str(";");
                temp_line = Some(decl);
                (temp, v.ty)
            }
        };
        let mut arms = Vec::new();
        let mut result_ty = Ty::Unknown;
        for arm in &m.arms {
            self.push_scope();
            let (cond, _) = self.pattern(&arm.pat, &name, &ty);
            let guard = arm.guard.as_ref().map(|(_, g)| self.expr_expect(g, &Ty::Scalar(Scalar::Bool)));
            let arm_guard = self.arm_guard(&m.expr, arm);
            let depth = self.enter_guards(vec![arm_guard], Vec::new());
            let value = match &*arm.body {
                Expr::Block(b) => self.block_value(&b.block),
                e => self.expr(e),
            };
            self.leave_guards(depth);
            self.pop_scope();
            self.unify(&result_ty.clone(), &value.ty);
            if matches!(result_ty, Ty::Unknown | Ty::Unit) {
                result_ty = value.ty.clone();
            }
            let cond = match (cond, guard) {
                (None, None) => None,
                (Some(c), None) => Some(c),
                (None, Some(g)) => Some(g.operand()),
                (Some(c), Some(g)) => {
                    let mut out = c;
                    out.push_str(" && ").push(g.operand());
                    Some(out)
                }
            };
            arms.push((cond, value));
        }
        self.forget_assigned_in(&Expr::Match(m.clone()));
        let mut code = Code::new();
        let n = arms.len();
        for (i, (cond, value)) in arms.into_iter().enumerate() {
            match cond {
                Some(c) if i + 1 < n => {
                    code.push(c.parens()).push_str(" ? ").push(value.operand()).push_str(" : ");
                }
                _ => {
                    code.push(value.operand());
                    break;
                }
            }
        }
        match temp_line {
            Some(decl) => {
                let mut out = Code::text("({ ");
                out.push(decl).push_str(" ").push(code).push_str("; })");
                Val::new(out, result_ty)
            }
            None => Val { code, ty: result_ty, index: IndexValue::Unknown, atom: false },
        }
    }

    fn simple_local(&self, e: &Expr) -> Option<(String, Ty)> {
        let Expr::Path(p) = e else { return None };
        let id = self.lookup(&p.path.get_ident()?.to_string())?;
        Some((self.locals[id].cpp.clone(), self.locals[id].ty.clone()))
    }

    /// The C++ name the arms test: the local itself, or a temporary in a new block.
    fn scrutinee(&mut self, e: &Expr, line: usize) -> (String, Ty, bool) {
        if let Some((name, ty)) = self.simple_local(e) {
            return (name, ty, false);
        }
        let v = self.expr(e);
        self.emit_text("{");
        self.indent += 1;
        let temp = self.temp_name("matched");
        let mut decl = Code::text(format!("auto {temp} = "));
        decl.push(v.code).push_str(";");
        self.emit(decl, line);
        (temp, v.ty, true)
    }

    /// The test a pattern makes of `name` (`None`: always matches) and its bindings (`n`, `mut n`).
    fn pattern(&mut self, p: &Pat, name: &str, ty: &Ty) -> (Option<Code>, Vec<(String, bool)>) {
        match p {
            Pat::Wild(_) => (None, Vec::new()),
            Pat::Ident(pi) if pi.subpat.is_none() => {
                let rust = pi.ident.to_string();
                if is_camel(&rust) || is_screaming(&rust) {
                    // A unit value or constant named without a path.
                    let path: syn::ExprPath = syn::parse_quote!(#pi);
                    let v = self.expr(&Expr::Path(path));
                    let mut c = Code::text(format!("{name} == "));
                    c.push(v.code);
                    return (Some(c), Vec::new());
                }
                // Bound as an alias of the scrutinee; `mut` bindings get a copy in the arm.
                self.declare_named(&rust, name.to_string(), ty.clone(), IndexValue::Unknown);
                (None, vec![(rust, pi.mutability.is_some())])
            }
            Pat::Lit(l) => {
                let v = self.expr_expect(&Expr::Lit(l.clone()), ty);
                let mut c = Code::text(format!("{name} == "));
                c.push(v.code);
                (Some(c), Vec::new())
            }
            Pat::Path(pp) => {
                let v = self.expr(&Expr::Path(pp.clone()));
                let mut c = Code::text(format!("{name} == "));
                c.push(v.code);
                (Some(c), Vec::new())
            }
            Pat::Range(r) => {
                let mut parts = Vec::new();
                if let Some(s) = &r.start {
                    let v = self.expr_expect(s, ty);
                    let mut c = Code::text(format!("{name} >= "));
                    c.push(v.operand());
                    parts.push(c);
                }
                if let Some(e) = &r.end {
                    let v = self.expr_expect(e, ty);
                    let op = match r.limits {
                        syn::RangeLimits::Closed(_) => "<=",
                        syn::RangeLimits::HalfOpen(_) => "<",
                    };
                    let mut c = Code::text(format!("{name} {op} "));
                    c.push(v.operand());
                    parts.push(c);
                }
                let c = Code::join(parts, " && ");
                (Some(c.parens()), Vec::new())
            }
            Pat::Or(o) => {
                let mut parts = Vec::new();
                for case in &o.cases {
                    match self.pattern(case, name, ty) {
                        (Some(c), _) => parts.push(c),
                        (None, b) => return (None, b),
                    }
                }
                (Some(Code::join(parts, " || ").parens()), Vec::new())
            }
            Pat::Paren(pp) => self.pattern(&pp.pat, name, ty),
            // Rejected by validation; its names draw no more errors.
            other => {
                self.declare_refused(other);
                (None, Vec::new())
            }
        }
    }
}
