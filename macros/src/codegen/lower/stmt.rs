//! Statements, control flow, `let`, loops and `match`.

use syn::visit::Visit;
use syn::{Block, Expr, Pat, Stmt};

use super::code::Code;
use super::expr::{is_camel, is_screaming, Val};
use super::{line_of, LoopFrame, Lowerer};
use crate::codegen::types::{Position, Scalar, Ty};
use crate::codegen::usage::IndexValue;

/// Where the value of a block's tail expression goes.
#[derive(Clone)]
pub(crate) enum Sink {
    /// The block is a statement: its tail (of type `()`) is a statement too.
    Discard,
    /// The function's result.
    Return,
    /// A variable declared just before (`let x: T = if … { a } else { b };`).
    Assign(String, Ty),
}

/// A `for` loop's iteration, recognised from the iterator expression.
enum Iteration<'e> {
    Range { start: &'e Expr, end: &'e Expr, inclusive: bool, step: Option<&'e Expr>, reverse: bool },
    GridStride(&'e Expr),
}

impl Lowerer<'_> {
    pub(crate) fn lower_fn_block(&mut self, block: &Block, ret: &Ty) {
        let sink = if matches!(ret, Ty::Unit) { Sink::Discard } else { Sink::Return };
        self.block_stmts(block, &sink);
    }

    /// The statements of `block` in the current scope; the tail expression goes to `sink`.
    pub(crate) fn block_stmts(&mut self, block: &Block, sink: &Sink) {
        let n = block.stmts.len();
        for (i, s) in block.stmts.iter().enumerate() {
            match s {
                Stmt::Expr(e, None) if i + 1 == n => self.tail(e, sink),
                _ => self.stmt(s),
            }
        }
    }

    fn braced_block(&mut self, block: &Block, sink: &Sink) {
        self.indent += 1;
        self.push_scope();
        self.block_stmts(block, sink);
        self.pop_scope();
        self.indent -= 1;
    }

    fn tail(&mut self, e: &Expr, sink: &Sink) {
        if let Sink::Discard = sink {
            return self.expr_stmt(e);
        }
        match e {
            Expr::If(i) => self.if_stmt(i, sink),
            Expr::Match(m) => self.match_stmt(m, sink),
            Expr::Block(b) if b.label.is_none() => {
                self.emit_text("{");
                self.braced_block(&b.block, sink);
                self.emit_text("}");
            }
            Expr::Return(_)
            | Expr::Break(_)
            | Expr::Continue(_)
            | Expr::Loop(_)
            | Expr::While(_)
            | Expr::ForLoop(_) => self.expr_stmt(e),
            _ => {
                let line = line_of(e);
                match sink {
                    Sink::Return => {
                        let ret = self.sig.ret_ty.clone();
                        let v = self.expr_expect(e, &ret);
                        let mut code = Code::text("return ");
                        code.push(v.code).push_str(";");
                        self.emit(code, line);
                    }
                    Sink::Assign(name, ty) => {
                        let v = self.expr_expect(e, ty);
                        let mut code = Code::text(format!("{name} = "));
                        code.push(v.code).push_str(";");
                        self.emit(code, line);
                    }
                    Sink::Discard => {}
                }
            }
        }
    }

    pub(crate) fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Local(local) => self.let_stmt(local),
            Stmt::Expr(e, _) => self.expr_stmt(e),
            // `use` inside a body only matters to rustc; other items and macros were rejected by `valid`.
            Stmt::Item(_) | Stmt::Macro(_) => {}
        }
    }

    pub(crate) fn expr_stmt(&mut self, e: &Expr) {
        let line = line_of(e);
        match e {
            Expr::If(i) => self.if_stmt(i, &Sink::Discard),
            Expr::While(w) => self.while_stmt(w),
            Expr::Loop(l) => {
                let head = Code::text("while (true) {");
                self.loop_with_body(l.label.as_ref(), false, head, line, &l.body, Vec::new(), Vec::new());
            }
            Expr::ForLoop(f) => self.for_stmt(f),
            Expr::Block(b) if b.label.is_none() => {
                self.emit_text("{");
                self.braced_block(&b.block, &Sink::Discard);
                self.emit_text("}");
            }
            Expr::Match(m) => self.match_stmt(m, &Sink::Discard),
            Expr::Return(r) => {
                let code = match &r.expr {
                    Some(v) => {
                        let ret = self.sig.ret_ty.clone();
                        let v = self.expr_expect(v, &ret);
                        let mut c = Code::text("return ");
                        c.push(v.code).push_str(";");
                        c
                    }
                    None => Code::text("return;"),
                };
                self.emit(code, line);
            }
            Expr::Break(b) => {
                let code = self.break_code(b.label.as_ref());
                self.emit(code, line);
            }
            Expr::Continue(c) => {
                let code = self.continue_code(c.label.as_ref());
                self.emit(code, line);
            }
            Expr::Paren(p) => self.expr_stmt(&p.expr),
            _ => {
                let v = self.expr(e);
                if !v.code.is_empty() {
                    let mut code = v.code;
                    code.push_str(";");
                    self.emit(code, line);
                }
            }
        }
    }

    fn if_stmt(&mut self, i: &syn::ExprIf, sink: &Sink) {
        let mut current = i;
        let mut first = true;
        loop {
            let cond = self.expr_expect(&current.cond, &Ty::Scalar(Scalar::Bool));
            let mut head = Code::text(if first { "if (" } else { "} else if (" });
            head.push(cond.code).push_str(") {");
            self.emit(head, line_of(&current.cond));
            first = false;
            self.braced_block(&current.then_branch, sink);
            match current.else_branch.as_ref().map(|(_, e)| &**e) {
                None => break,
                Some(Expr::If(next)) => current = next,
                Some(Expr::Block(b)) => {
                    self.emit_text("} else {");
                    self.braced_block(&b.block, sink);
                    break;
                }
                Some(other) => {
                    self.emit_text("} else {");
                    self.indent += 1;
                    self.tail(other, sink);
                    self.indent -= 1;
                    break;
                }
            }
        }
        self.emit_text("}");
    }

    fn while_stmt(&mut self, w: &syn::ExprWhile) {
        let cond = self.expr_expect(&w.cond, &Ty::Scalar(Scalar::Bool));
        let mut head = Code::text("while (");
        head.push(cond.code).push_str(") {");
        self.loop_with_body(w.label.as_ref(), false, head, line_of(&w.cond), &w.body, Vec::new(), Vec::new());
    }

    /// Emits `head`, the body (with `prologue` first and `epilogue` after a `continue` target), and `}`.
    #[allow(clippy::too_many_arguments)]
    fn loop_with_body(
        &mut self,
        label: Option<&syn::Label>,
        continue_needs_label: bool,
        head: Code,
        line: usize,
        body: &Block,
        prologue: Vec<Code>,
        epilogue: Vec<Code>,
    ) {
        self.emit(head, line);
        self.indent += 1;
        self.loops.push(LoopFrame {
            label: label.map(|l| l.name.ident.to_string()),
            continue_goto: None,
            continue_label: None,
            break_label: None,
            continue_label_used: false,
            break_label_used: false,
        });
        if continue_needs_label {
            let name = self.loop_label_name("next");
            if let Some(f) = self.loops.last_mut() {
                f.continue_goto = Some(name);
            }
        }
        for p in prologue {
            self.emit(p, 0);
        }
        let body_lines = self.capture(|l| {
            l.push_scope();
            l.block_stmts(body, &Sink::Discard);
            l.pop_scope();
        });
        let frame = self.loops.pop();
        let continue_label = frame.as_ref().filter(|f| f.continue_label_used).and_then(|f| f.continue_goto.clone());
        match &continue_label {
            Some(label) => {
                // The label sits after the body's block, so a jump to it crosses no initialisation.
                self.emit_text("{");
                self.append_lines(body_lines, self.indent + 1);
                self.emit_text("}");
                self.emit_text(format!("{label}:;"));
            }
            None => {
                let indent = self.indent;
                self.append_lines(body_lines, indent);
            }
        }
        for e in epilogue {
            self.emit(e, 0);
        }
        self.indent -= 1;
        self.emit_text("}");
        if let Some(f) = frame.filter(|f| f.break_label_used) {
            if let Some(label) = f.break_label {
                self.emit_text(format!("{label}:;"));
            }
        }
    }

    fn append_lines(&mut self, lines: Vec<super::Line>, base: usize) {
        for mut line in lines {
            line.indent += base;
            self.lines.push(line);
        }
    }

    fn loop_label_name(&mut self, what: &str) -> String {
        let depth = self.loops.len();
        let base = match self.loops.last().and_then(|f| f.label.clone()) {
            Some(l) => format!("{l}_{what}"),
            None => format!("loop{depth}_{what}"),
        };
        self.temp_name(&base)
    }

    fn target_frame(&mut self, label: Option<&syn::Lifetime>) -> Option<usize> {
        match label {
            None => self.loops.len().checked_sub(1),
            Some(l) => {
                let name = l.ident.to_string();
                self.loops.iter().rposition(|f| f.label.as_deref() == Some(name.as_str()))
            }
        }
    }

    fn break_code(&mut self, label: Option<&syn::Lifetime>) -> Code {
        let Some(i) = self.target_frame(label) else { return Code::text("break;") };
        if i + 1 == self.loops.len() {
            return Code::text("break;");
        }
        let name = match self.loops[i].break_label.clone() {
            Some(n) => n,
            None => {
                let base = format!("{}_break", self.loops[i].label.clone().unwrap_or_else(|| "loop".into()));
                let n = self.temp_name(&base);
                self.loops[i].break_label = Some(n.clone());
                n
            }
        };
        self.loops[i].break_label_used = true;
        Code::text(format!("goto {name};"))
    }

    fn continue_code(&mut self, label: Option<&syn::Lifetime>) -> Code {
        let Some(i) = self.target_frame(label) else { return Code::text("continue;") };
        let innermost = i + 1 == self.loops.len();
        if innermost && self.loops[i].continue_goto.is_none() {
            return Code::text("continue;");
        }
        let name = match self.loops[i].continue_goto.clone() {
            Some(n) => n,
            None => {
                let base = format!("{}_continue", self.loops[i].label.clone().unwrap_or_else(|| "loop".into()));
                let n = self.temp_name(&base);
                self.loops[i].continue_goto = Some(n.clone());
                n
            }
        };
        self.loops[i].continue_label_used = true;
        self.loops[i].continue_label = Some(name.clone());
        Code::text(format!("goto {name};"))
    }

    fn for_stmt(&mut self, f: &syn::ExprForLoop) {
        let line = line_of(&f.expr);
        let Some(iteration) = iteration(&f.expr) else { return };
        let (var_rust, var_mut) = match &*f.pat {
            Pat::Ident(pi) => (Some(pi.ident.to_string()), pi.mutability.is_some()),
            Pat::Wild(_) => (None, false),
            _ => return,
        };
        let (start_expr, end_expr, inclusive, step_expr, reverse, grid) = match iteration {
            Iteration::Range { start, end, inclusive, step, reverse } => {
                (Some(start), end, inclusive, step, reverse, false)
            }
            Iteration::GridStride(n) => (None, n, false, None, false, true),
        };
        // Bounds are evaluated once, before the loop variable exists (Rust evaluates the range first).
        let (start, end, ty) = match start_expr {
            Some(start) => {
                let s = self.expr(start);
                let e = self.expr(end_expr);
                self.unify(&s.ty, &e.ty);
                let ty = pick_loop_type(&s.ty, &e.ty);
                (s, e, ty)
            }
            None => {
                let e = self.expr_expect(end_expr, &Ty::Scalar(Scalar::Usize));
                (Val::new(Code::text("weft::index_1d()"), Ty::Scalar(Scalar::Usize)), e, Ty::Scalar(Scalar::Usize))
            }
        };
        let step = step_expr.map(|s| (self.expr_expect(s, &Ty::Scalar(Scalar::Usize)), is_stable(s, &f.body)));
        let stable_end = is_stable(end_expr, &f.body);
        let stable_start = start_expr.is_none_or(|s| is_stable(s, &f.body));

        let hint = super::cpp_ident(var_rust.as_deref().unwrap_or("i"));
        let iter_name = match (&var_rust, var_mut) {
            (Some(rust), false) => self.fresh_name(rust),
            _ => self.temp_name(&format!("{hint}_it")),
        };
        // Declarations the loop needs before it (a wrapping block keeps them local).
        let mut pre: Vec<Code> = Vec::new();
        let mut init_extra: Option<Code> = None;
        let mut hoisted_end = None;
        let ty_code = match &ty {
            Ty::Unknown => {
                // Neither bound has a type the macro knows: hoist the end and name its type.
                let n = self.temp_name(&format!("{hint}_end"));
                let mut d = Code::text(format!("auto {n} = "));
                d.push(end.code.clone()).push_str(";");
                pre.push(d);
                hoisted_end = Some(n.clone());
                Code::text(format!("decltype({n})"))
            }
            t => Code::ty(t.clone()),
        };
        let end_ref = if let Some(n) = &hoisted_end {
            Code::text(n.clone())
        } else if stable_end || reverse {
            end.clone_operand()
        } else {
            let n = self.temp_name(&format!("{hint}_end"));
            let mut x = Code::text(format!(", {n} = "));
            x.push(end.code.clone());
            init_extra = Some(x);
            Code::text(n)
        };
        let start_ref = if reverse && !stable_start {
            let n = self.temp_name(&format!("{hint}_begin"));
            let mut d = Code::text(format!("auto {n} = "));
            d.push(start.code.clone());
            d.push_str(";");
            pre.push(d);
            Code::text(n)
        } else {
            start.clone_operand()
        };
        let step_ref = match &step {
            Some((s, true)) => Some(s.clone_operand()),
            Some((s, false)) => {
                let n = self.temp_name(&format!("{hint}_step"));
                let mut d = Code::text(format!("auto {n} = "));
                d.push(s.code.clone());
                d.push_str(";");
                pre.push(d);
                Some(Code::text(n))
            }
            None => None,
        };
        if !pre.is_empty() {
            self.emit_text("{");
            self.indent += 1;
            for d in std::mem::take(&mut pre) {
                self.emit(d, line);
            }
            pre.push(Code::new());
        }
        let wrapped = !pre.is_empty();

        let mut head = Code::text("for (");
        let mut prologue = Vec::new();
        let mut epilogue = Vec::new();
        let mut decl = ty_code.clone();
        if reverse {
            // `(a..b).rev()`: count down from `b`, decrementing first, so `continue` needs nothing special.
            decl.push_str(&format!(" {iter_name} = ")).push(end.code.clone());
            head.push(decl).push_str(&format!("; {iter_name} > ")).push(start_ref).push_str("; ) {");
            prologue.push(Code::text(format!("--{iter_name};")));
        } else {
            decl.push_str(&format!(" {iter_name} = ")).push(start.code.clone());
            if let Some(x) = init_extra {
                decl.push(x);
            }
            let cmp = if inclusive { "<=" } else { "<" };
            let advance = match (step_ref, grid) {
                (_, true) => Code::text(format!("{iter_name} += weft::grid_size_1d()")),
                (Some(s), _) => {
                    let mut a = Code::text(format!("{iter_name} += "));
                    a.push(s);
                    a
                }
                (None, false) => Code::text(format!("++{iter_name}")),
            };
            head.push(decl).push_str(&format!("; {iter_name} {cmp} ")).push(end_ref.clone()).push_str("; ");
            head.push(advance).push_str(") {");
            if inclusive {
                // `a..=b` must stop at `b` even when `b` is the type's maximum.
                let mut check = Code::text(format!("if ({iter_name} == "));
                check.push(end_ref).push_str(") break;");
                epilogue.push(check);
            }
        }
        self.push_scope();
        let declared_ty = ty.clone();
        if let Some(rust) = &var_rust {
            if var_mut {
                // Assigning the variable must not change the iteration, as in Rust.
                let name = self.fresh_name(rust);
                let mut copy = ty_code.clone();
                copy.push_str(&format!(" {name} = {iter_name};"));
                prologue.push(copy);
                self.declare_named(rust, name, declared_ty, IndexValue::Unknown);
            } else {
                self.declare_named(rust, iter_name.clone(), declared_ty, IndexValue::Unknown);
            }
        }
        self.loop_with_body(f.label.as_ref(), inclusive, head, line, &f.body, prologue, epilogue);
        self.pop_scope();
        if wrapped {
            self.indent -= 1;
            self.emit_text("}");
        }
    }

    fn let_stmt(&mut self, local: &syn::Local) {
        let line = line_of(local);
        let (pat, annotation) = match &local.pat {
            Pat::Type(pt) => (&*pt.pat, Some(&*pt.ty)),
            p => (p, None),
        };
        let annotation = annotation.filter(|t| !matches!(t, syn::Type::Infer(_)));
        let init = local.init.as_ref().map(|i| &*i.expr);

        if let Some(init) = init {
            if self.shared_array(pat, annotation, init, line) {
                return;
            }
        }
        let mapped = match annotation {
            Some(t) => match self.mapper().map(t, Position::Local) {
                Some(m) => Some(m),
                None => return,
            },
            None => None,
        };
        match pat {
            Pat::Ident(pi) => {
                let rust = pi.ident.to_string();
                let mutable = pi.mutability.is_some();
                let Some(init) = init else {
                    let Some((cpp, ty)) = mapped else {
                        self.cx.error_spanned_by(
                            local,
                            format!("give `{rust}` a type or an initial value: `let {rust}: u32;`"),
                        );
                        return;
                    };
                    let name = self.fresh_name(&rust);
                    self.emit(Code::text(format!("{cpp} {name};")), line);
                    self.declare_named(&rust, name, ty, IndexValue::Unknown);
                    return;
                };
                // `let x: T = if … { … } else { … };` with statements in the branches: declare, then assign.
                if let (Some((cpp, ty)), true) = (&mapped, needs_statements(init)) {
                    let name = self.fresh_name(&rust);
                    self.emit(Code::text(format!("{cpp} {name};")), line);
                    let sink = Sink::Assign(name.clone(), ty.clone());
                    self.tail(init, &sink);
                    self.declare_named(&rust, name, ty.clone(), IndexValue::Unknown);
                    return;
                }
                let value = match &mapped {
                    Some((_, ty)) => self.expr_expect(init, ty),
                    None => self.expr(init),
                };
                let name = self.fresh_name(&rust);
                let (decl, ty) = match mapped {
                    Some((cpp, ty)) => (Code::text(cpp), ty),
                    None => match &value.ty {
                        Ty::Var(v) => {
                            self.let_vars.push((*v, pi.ident.span(), rust.clone()));
                            (Code::ty(value.ty.clone()), value.ty.clone())
                        }
                        Ty::Unknown => (Code::text("auto"), Ty::Local(self.locals.len())),
                        Ty::Unit => (Code::text("auto"), Ty::Unknown),
                        t => (Code::text("auto"), t.clone()),
                    },
                };
                let index = if mutable { IndexValue::Unknown } else { value.index };
                let mut code = decl;
                code.push_str(&format!(" {name} = ")).push(value.code).push_str(";");
                self.emit(code, line);
                self.declare_named(&rust, name, ty, index);
            }
            Pat::Wild(_) => {
                if let Some(init) = init {
                    let v = self.expr(init);
                    let mut code = Code::text("(void)(");
                    code.push(v.code).push_str(");");
                    self.emit(code, line);
                }
            }
            Pat::Tuple(t) => {
                let Some(init) = init else {
                    self.cx.error_spanned_by(local, "give the tuple an initial value");
                    return;
                };
                let expect = mapped.as_ref().map(|(_, t)| t.clone());
                // A tuple of values binds each directly; evaluate all before binding any (shadowing).
                if let (Expr::Tuple(values), true) = (init, !t.elems.is_empty()) {
                    if values.elems.len() == t.elems.len() {
                        let mut vals = Vec::new();
                        for (i, v) in values.elems.iter().enumerate() {
                            let want = match &expect {
                                Some(Ty::Tuple(ts)) => ts.get(i).cloned(),
                                _ => None,
                            };
                            vals.push(match want {
                                Some(w) => self.expr_expect(v, &w),
                                None => self.expr(v),
                            });
                        }
                        for (p, v) in t.elems.iter().zip(vals) {
                            self.bind_pattern_value(p, v, line);
                        }
                        return;
                    }
                }
                let v = match &expect {
                    Some(e) => self.expr_expect(init, e),
                    None => self.expr(init),
                };
                let temp = self.temp_name("tuple");
                let ty = expect.unwrap_or(v.ty.clone());
                let mut code = Code::text(format!("auto {temp} = "));
                code.push(v.code).push_str(";");
                self.emit(code, line);
                self.destructure(&t.elems.iter().collect::<Vec<_>>(), &temp, &ty, line);
            }
            _ => {}
        }
    }

    fn bind_pattern_value(&mut self, p: &Pat, v: Val, line: usize) {
        match p {
            Pat::Ident(pi) => {
                let rust = pi.ident.to_string();
                let name = self.fresh_name(&rust);
                let decl = match &v.ty {
                    Ty::Var(var) => {
                        self.let_vars.push((*var, pi.ident.span(), rust.clone()));
                        Code::ty(v.ty.clone())
                    }
                    _ => Code::text("auto"),
                };
                let ty = match &v.ty {
                    Ty::Unknown => Ty::Local(self.locals.len()),
                    t => t.clone(),
                };
                let mut code = decl;
                code.push_str(&format!(" {name} = ")).push(v.code).push_str(";");
                self.emit(code, line);
                let index = if pi.mutability.is_some() { IndexValue::Unknown } else { v.index };
                self.declare_named(&rust, name, ty, index);
            }
            Pat::Wild(_) => {
                let mut code = Code::text("(void)(");
                code.push(v.code).push_str(");");
                self.emit(code, line);
            }
            Pat::Tuple(t) => {
                let temp = self.temp_name("tuple");
                let mut code = Code::text(format!("auto {temp} = "));
                code.push(v.code).push_str(";");
                self.emit(code, line);
                self.destructure(&t.elems.iter().collect::<Vec<_>>(), &temp, &v.ty, line);
            }
            _ => {}
        }
    }

    /// `let (a, (b, _)) = t;` → `auto a = t._0; auto tuple_1 = t._1; auto b = tuple_1._0;`
    fn destructure(&mut self, pats: &[&Pat], source: &str, ty: &Ty, line: usize) {
        for (i, p) in pats.iter().enumerate() {
            let elem_ty = match ty {
                Ty::Tuple(ts) => ts.get(i).cloned().unwrap_or(Ty::Unknown),
                _ => Ty::Unknown,
            };
            match p {
                Pat::Wild(_) => {}
                _ => {
                    let v = Val::new(Code::text(format!("{source}._{i}")), elem_ty);
                    self.bind_pattern_value(p, v, line);
                }
            }
        }
    }

    /// R12: `let s = SharedArray::<T, N>::new();` → `__shared__ weft::SharedArray<T', N> s;`
    fn shared_array(&mut self, pat: &Pat, annotation: Option<&syn::Type>, init: &Expr, line: usize) -> bool {
        let Expr::Call(call) = init else { return false };
        let Expr::Path(p) = &*call.func else { return false };
        let segs: Vec<_> = p.path.segments.iter().collect();
        if segs.len() < 2 || segs[segs.len() - 1].ident != "new" || segs[segs.len() - 2].ident != "SharedArray" {
            return false;
        }
        let Pat::Ident(pi) = pat else {
            self.cx.error_spanned_by(pat, "bind a shared array to a plain name");
            return true;
        };
        let type_seg = segs[segs.len() - 2];
        let ty: syn::Type = match (&type_seg.arguments, annotation) {
            (syn::PathArguments::AngleBracketed(a), _) => {
                let args = &a.args;
                syn::parse_quote!(SharedArray<#args>)
            }
            (_, Some(t)) => t.clone(),
            _ => {
                self.cx.error_spanned_by(
                    init,
                    "name the element type and length: `SharedArray::<f32, 256>::new()` or annotate the `let`",
                );
                return true;
            }
        };
        let Some((cpp, t)) = self.mapper().map(&ty, Position::Local) else { return true };
        let rust = pi.ident.to_string();
        let name = self.fresh_name(&rust);
        self.emit(Code::text(format!("__shared__ {cpp} {name};")), line);
        self.declare_named(&rust, name, t, IndexValue::Unknown);
        true
    }

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
            let unconditional_first = cond.is_none() && !opened;
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
            match &*arm.body {
                Expr::Block(b) if b.label.is_none() => {
                    self.push_scope();
                    self.block_stmts(&b.block, sink);
                    self.pop_scope();
                }
                other => self.tail(other, sink),
            }
            self.indent -= 1;
            self.pop_scope();
            if unconditional_first {
                break;
            }
        }
        if opened {
            self.emit_text("}");
        }
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
            let value = match &*arm.body {
                Expr::Block(b) => self.block_value(&b.block),
                e => self.expr(e),
            };
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
            _ => (None, Vec::new()),
        }
    }
}

/// `if`/`match`/blocks whose branches have statements: in `let x: T = …` they become assignments per branch.
fn needs_statements(e: &Expr) -> bool {
    match e {
        Expr::If(i) => {
            i.then_branch.stmts.len() != 1
                || !matches!(i.then_branch.stmts[0], Stmt::Expr(_, None))
                || i.else_branch.as_ref().is_some_and(|(_, e)| match &**e {
                    Expr::Block(b) => b.block.stmts.len() != 1 || !matches!(b.block.stmts[0], Stmt::Expr(_, None)),
                    other => needs_statements(other),
                })
        }
        Expr::Match(_) => true,
        Expr::Block(b) => b.block.stmts.len() != 1 || !matches!(b.block.stmts[0], Stmt::Expr(_, None)),
        _ => false,
    }
}

fn strip_paren(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip_paren(&p.expr),
        Expr::Group(g) => strip_paren(&g.expr),
        other => other,
    }
}

/// Recognises the iterations `for` supports (`valid` rejected the rest).
fn iteration(e: &Expr) -> Option<Iteration<'_>> {
    match strip_paren(e) {
        Expr::Range(r) => Some(Iteration::Range {
            start: r.start.as_deref()?,
            end: r.end.as_deref()?,
            inclusive: matches!(r.limits, syn::RangeLimits::Closed(_)),
            step: None,
            reverse: false,
        }),
        Expr::MethodCall(m) if m.method == "step_by" && m.args.len() == 1 => match iteration(&m.receiver)? {
            Iteration::Range { start, end, inclusive, step: None, reverse: false } => {
                Some(Iteration::Range { start, end, inclusive, step: m.args.first(), reverse: false })
            }
            _ => None,
        },
        Expr::MethodCall(m) if m.method == "rev" && m.args.is_empty() => match iteration(&m.receiver)? {
            Iteration::Range { start, end, inclusive: false, step: None, reverse: false } => {
                Some(Iteration::Range { start, end, inclusive: false, step: None, reverse: true })
            }
            _ => None,
        },
        Expr::Call(c) if c.args.len() == 1 => match &*c.func {
            Expr::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "grid_stride") => {
                Some(Iteration::GridStride(c.args.first()?))
            }
            _ => None,
        },
        _ => None,
    }
}

/// A loop bound that can be re-evaluated every iteration: a literal, or a local the body never assigns.
fn is_stable(e: &Expr, body: &Block) -> bool {
    match strip_paren(e) {
        Expr::Lit(_) => true,
        Expr::Path(p) => match p.path.get_ident() {
            Some(ident) => {
                let mut finder = AssignFinder { name: ident.to_string(), found: false };
                finder.visit_block(body);
                !finder.found
            }
            None => false,
        },
        _ => false,
    }
}

struct AssignFinder {
    name: String,
    found: bool,
}

impl AssignFinder {
    fn is_target(&self, e: &Expr) -> bool {
        matches!(strip_paren(e), Expr::Path(p) if p.path.is_ident(&self.name))
    }
}

impl<'ast> Visit<'ast> for AssignFinder {
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        self.found |= self.is_target(&a.left);
        syn::visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        let compound = matches!(
            b.op,
            syn::BinOp::AddAssign(_)
                | syn::BinOp::SubAssign(_)
                | syn::BinOp::MulAssign(_)
                | syn::BinOp::DivAssign(_)
                | syn::BinOp::RemAssign(_)
                | syn::BinOp::BitAndAssign(_)
                | syn::BinOp::BitOrAssign(_)
                | syn::BinOp::BitXorAssign(_)
                | syn::BinOp::ShlAssign(_)
                | syn::BinOp::ShrAssign(_)
        );
        self.found |= compound && self.is_target(&b.left);
        syn::visit::visit_expr_binary(self, b);
    }
    fn visit_expr_reference(&mut self, r: &'ast syn::ExprReference) {
        self.found |= r.mutability.is_some() && self.is_target(&r.expr);
        syn::visit::visit_expr_reference(self, r);
    }
    fn visit_local(&mut self, l: &'ast syn::Local) {
        // A shadowing `let` of the same name makes later assignments refer to the new binding; stay conservative.
        syn::visit::visit_local(self, l);
    }
}

/// The loop variable's type from the bounds' types.
fn pick_loop_type(start: &Ty, end: &Ty) -> Ty {
    match (start, end) {
        (Ty::Scalar(_) | Ty::Param(_) | Ty::Local(_), _) => start.clone(),
        (_, Ty::Scalar(_) | Ty::Param(_) | Ty::Local(_)) => end.clone(),
        (Ty::Var(_), Ty::Unknown) => Ty::Unknown,
        (Ty::Var(_), _) => start.clone(),
        (_, Ty::Var(_)) => end.clone(),
        _ => Ty::Unknown,
    }
}
