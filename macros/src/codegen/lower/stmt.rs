//! Statements, blocks with a destination for their value, `if`, and `let`.

use syn::{Block, Expr, Pat, Stmt};

use super::code::Code;
use super::expr::Val;
use super::{line_of, LetVarReason, Lowerer};
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

impl Lowerer<'_> {
    pub(crate) fn lower_fn_block(&mut self, block: &Block, ret: &Ty) {
        let sink = if matches!(ret, Ty::Unit) { Sink::Discard } else { Sink::Return };
        self.block_stmts(block, &sink);
    }

    /// The statements of `block` in the current scope; the tail expression goes to `sink`.
    pub(crate) fn block_stmts(&mut self, block: &Block, sink: &Sink) {
        let n = block.stmts.len();
        let depth = self.enter_guards(Vec::new(), Vec::new());
        for (i, s) in block.stmts.iter().enumerate() {
            match s {
                Stmt::Expr(e, None) if i + 1 == n => self.tail(e, sink),
                _ => self.stmt(s),
            }
            self.after_early_exit(s);
        }
        self.leave_guards(depth);
    }

    /// What the rest of a block may assume after `s`: `if c { …; return; }` (no `else`) means `!c` from here on; any
    /// other statement that may leave early (`return`, or `break`/`continue` out of it) hides which values the rest
    /// runs with, so no bound after it is exact.
    fn after_early_exit(&mut self, s: &Stmt) {
        let e = match s {
            Stmt::Expr(e, _) => e,
            Stmt::Local(l) => match &l.init {
                Some(init) if super::bounds::leaves(&init.expr, 0) => {
                    self.guards.push(super::bounds::Guard::opaque());
                    return;
                }
                _ => return,
            },
            _ => return,
        };
        if let Expr::If(i) = e {
            if i.else_branch.is_none() && super::bounds::diverges(&i.then_branch) {
                let (guards, narrowed) = self.guards_of(&i.cond, true);
                self.guards.extend(guards);
                self.overrides.extend(narrowed);
                return;
            }
        }
        if super::bounds::leaves(e, 0) {
            self.guards.push(super::bounds::Guard::opaque());
        }
    }

    pub(crate) fn braced_block(&mut self, block: &Block, sink: &Sink) {
        self.indent += 1;
        self.push_scope();
        self.block_stmts(block, sink);
        self.pop_scope();
        self.indent -= 1;
    }

    pub(crate) fn tail(&mut self, e: &Expr, sink: &Sink) {
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
                        self.check_not_moved(e);
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
            Stmt::Expr(Expr::Verbatim(v), Some(_)) if v.is_empty() => {}
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
            Expr::Loop(l) => self.loop_stmt(l, line),
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
                        self.check_not_moved(v);
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
        // Each branch runs where the earlier conditions failed (the bounds analysis narrows by both).
        let mut earlier: Vec<&Expr> = Vec::new();
        let mut branches: Vec<&Block> = Vec::new();
        let under = |l: &mut Self, earlier: &[&Expr], cond: Option<&Expr>| {
            let (mut guards, mut narrowed) = (Vec::new(), Vec::new());
            for e in earlier {
                let (g, n) = l.guards_of(e, true);
                guards.extend(g);
                narrowed.extend(n);
            }
            if let Some(c) = cond {
                let (g, n) = l.guards_of(c, false);
                guards.extend(g);
                narrowed.extend(n);
            }
            l.enter_guards(guards, narrowed)
        };
        loop {
            let depth = under(self, &earlier, None);
            let cond = self.expr_expect(&current.cond, &Ty::Scalar(Scalar::Bool));
            self.leave_guards(depth);
            let mut head = Code::text(if first { "if (" } else { "} else if (" });
            head.push(cond.code).push_str(") {");
            self.emit(head, line_of(&current.cond));
            first = false;
            let depth = under(self, &earlier, Some(&current.cond));
            self.braced_block(&current.then_branch, sink);
            self.leave_guards(depth);
            branches.push(&current.then_branch);
            earlier.push(&current.cond);
            match current.else_branch.as_ref().map(|(_, e)| &**e) {
                None => break,
                Some(Expr::If(next)) => current = next,
                Some(Expr::Block(b)) => {
                    self.emit_text("} else {");
                    let depth = under(self, &earlier, None);
                    self.braced_block(&b.block, sink);
                    self.leave_guards(depth);
                    branches.push(&b.block);
                    break;
                }
                Some(other) => {
                    self.emit_text("} else {");
                    self.indent += 1;
                    let depth = under(self, &earlier, None);
                    self.tail(other, sink);
                    self.leave_guards(depth);
                    self.indent -= 1;
                    self.forget_assigned_in(other);
                    break;
                }
            }
        }
        self.emit_text("}");
        self.forget_assigned(branches, &earlier);
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
            self.check_not_moved(init);
        }

        if let Some(init) = init {
            if self.shared_array(pat, annotation, init, line) {
                return;
            }
        }
        let mapped = match annotation {
            Some(t) => match self.mapper().map(t, Position::Local) {
                Some(m) => Some(m),
                None => {
                    if let Some(init) = init {
                        self.expr(init);
                    }
                    self.declare_refused(pat);
                    return;
                }
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
                        self.declare_refused(pat);
                        return;
                    };
                    let name = self.fresh_name(&rust);
                    self.emit(Code::text(format!("{cpp} {name};")), line);
                    let id = self.declare_named(&rust, name, ty, IndexValue::Unknown);
                    self.locals[id].mutable = mutable;
                    return;
                };
                // `let x: T = if … { … } else { … };` with statements in the branches: declare, then assign.
                if let (Some((cpp, ty)), true) = (&mapped, needs_statements(init)) {
                    let name = self.fresh_name(&rust);
                    self.emit(Code::text(format!("{cpp} {name};")), line);
                    let sink = Sink::Assign(name.clone(), ty.clone());
                    self.tail(init, &sink);
                    let id = self.declare_named(&rust, name, ty.clone(), IndexValue::Unknown);
                    self.locals[id].mutable = mutable;
                    return;
                }
                // A branch that leaves (`else { return; }`) has no value for `?:`: declare, then assign in the
                // branches that have one. The type comes from those values.
                if mapped.is_none() && leaves_somewhere(init) {
                    let v = self.vars.fresh(false, self.origin());
                    let name = self.fresh_name(&rust);
                    let mut decl = Code::ty(Ty::Var(v));
                    decl.push_str(&format!(" {name};"));
                    self.emit(decl, line);
                    self.let_vars.push((v, pi.ident.span(), rust.clone(), LetVarReason::Branches));
                    self.tail(init, &Sink::Assign(name.clone(), Ty::Var(v)));
                    let id = self.declare_named(&rust, name, Ty::Var(v), IndexValue::Unknown);
                    self.locals[id].mutable = mutable;
                    return;
                }
                let value = match &mapped {
                    Some((_, ty)) => self.expr_expect(init, ty),
                    None => self.expr(init),
                };
                let shape = self.shape(init);
                let name = self.fresh_name(&rust);
                let (decl, ty) = match mapped {
                    Some((cpp, ty)) => (Code::text(cpp), ty),
                    None => match &value.ty {
                        Ty::Var(v) => {
                            self.let_vars.push((*v, pi.ident.span(), rust.clone(), LetVarReason::Literal));
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
                let id = self.declare_named(&rust, name, ty, index);
                self.locals[id].mutable = mutable;
                self.locals[id].shape = shape;
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
                    self.declare_refused(pat);
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
                        let shapes: Vec<_> = values.elems.iter().map(|v| self.shape(v)).collect();
                        for ((p, v), shape) in t.elems.iter().zip(vals).zip(shapes) {
                            let before = self.locals.len();
                            self.bind_pattern_value(p, v, line);
                            if matches!(p, Pat::Ident(_)) && self.locals.len() == before + 1 {
                                self.locals[before].shape = shape;
                            }
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
            // Rejected by validation: lowered for the errors inside, its names bound so their uses say nothing more.
            _ => {
                if let Some(init) = init {
                    self.expr(init);
                }
                self.declare_refused(pat);
            }
        }
    }

    /// Binds every name of a pattern that could not be translated, typed `Ty::Error`.
    pub(crate) fn declare_refused(&mut self, pat: &Pat) {
        #[derive(Default)]
        struct Names(Vec<String>);
        impl<'ast> syn::visit::Visit<'ast> for Names {
            fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
                self.0.push(p.ident.to_string());
                syn::visit::visit_pat_ident(self, p);
            }
        }
        let mut names = Names::default();
        syn::visit::Visit::visit_pat(&mut names, pat);
        for rust in names.0 {
            let cpp = self.fresh_name(&rust);
            self.declare_named(&rust, cpp, Ty::Error, IndexValue::Unknown);
        }
    }

    fn bind_pattern_value(&mut self, p: &Pat, v: Val, line: usize) {
        match p {
            Pat::Ident(pi) => {
                let rust = pi.ident.to_string();
                let name = self.fresh_name(&rust);
                let decl = match &v.ty {
                    Ty::Var(var) => {
                        self.let_vars.push((*var, pi.ident.span(), rust.clone(), LetVarReason::Literal));
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
                let id = self.declare_named(&rust, name, ty, index);
                self.locals[id].mutable = pi.mutability.is_some();
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
            self.declare_refused(pat);
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
                self.declare_refused(pat);
                return true;
            }
        };
        let Some((cpp, t)) = self.mapper().map(&ty, Position::Local) else {
            self.declare_refused(pat);
            return true;
        };
        let rust = pi.ident.to_string();
        let name = self.fresh_name(&rust);
        self.emit(Code::text(format!("__shared__ {cpp} {name};")), line);
        let length = super::bounds::shared_length(&ty);
        let shape = self.shared_shape(&t, &rust, length);
        let id = self.declare_named(&rust, name, t, IndexValue::Unknown);
        self.locals[id].shape = shape;
        true
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

/// Whether a branch of an `if`/`match`/block value leaves instead of producing a value (`return`, `break`,
/// `continue`, or no tail expression).
fn leaves_somewhere(e: &Expr) -> bool {
    fn block_leaves(b: &Block) -> bool {
        match b.stmts.last() {
            Some(Stmt::Expr(e, None)) => leaves(e),
            _ => true,
        }
    }
    fn leaves(e: &Expr) -> bool {
        match e {
            Expr::Return(_) | Expr::Break(_) | Expr::Continue(_) => true,
            Expr::If(_) | Expr::Match(_) | Expr::Block(_) => leaves_somewhere(e),
            _ => false,
        }
    }
    match e {
        Expr::If(i) => {
            block_leaves(&i.then_branch)
                || match i.else_branch.as_ref().map(|(_, e)| &**e) {
                    Some(Expr::Block(b)) => block_leaves(&b.block),
                    Some(other) => leaves(other),
                    None => false,
                }
        }
        Expr::Match(m) => m.arms.iter().any(|a| match &*a.body {
            Expr::Block(b) => block_leaves(&b.block),
            other => leaves(other),
        }),
        Expr::Block(b) => block_leaves(&b.block),
        _ => false,
    }
}
