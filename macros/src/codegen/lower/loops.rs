//! Loops: `while`, `loop`, `for` over ranges and `grid_stride`, labels, `break` and `continue`.

use syn::visit::Visit;
use syn::{Block, Expr, Pat};

use super::code::Code;
use super::expr::Val;
use super::stmt::Sink;
use super::{line_of, LoopFrame, Lowerer};
use crate::codegen::types::{Scalar, Ty};
use crate::codegen::usage::IndexValue;
use crate::codegen::vocabulary::Vocab;

/// A `for` loop's iteration, recognised from the iterator expression.
enum Iteration<'e> {
    Range { start: &'e Expr, end: &'e Expr, inclusive: bool, step: Option<&'e Expr>, reverse: bool },
    GridStride(&'e Expr),
}

impl Lowerer<'_> {
    pub(crate) fn while_stmt(&mut self, w: &syn::ExprWhile) {
        // What the loop assigns is loop-carried: untracked at its head, bounded in the body where the condition
        // narrows it (`while p < n { …; p += stride; }`).
        self.forget_assigned([&w.body], &[&w.cond]);
        self.forget_assigned_in(&w.cond);
        let cond = self.expr_expect(&w.cond, &Ty::Scalar(Scalar::Bool));
        let mut head = Code::text("while (");
        head.push(cond.code).push_str(") {");
        let (guards, narrowed) = self.guards_of(&w.cond, false);
        let depth = self.enter_guards(guards, narrowed);
        if let Expr::Binary(b) = strip_paren(&w.cond) {
            if matches!(b.op, syn::BinOp::Lt(_) | syn::BinOp::Le(_)) && self.walks_tile_registers(&b.right) {
                self.emit_text("#pragma unroll");
            }
        }
        self.loop_with_body(w.label.as_ref(), false, head, line_of(&w.cond), &w.body, Vec::new(), Vec::new());
        self.leave_guards(depth);
        self.forget_assigned([&w.body], &[&w.cond]);
    }

    /// `loop { … }`.
    pub(crate) fn loop_stmt(&mut self, l: &syn::ExprLoop, line: usize) {
        self.forget_assigned([&l.body], &[]);
        let head = Code::text("while (true) {");
        self.loop_with_body(l.label.as_ref(), false, head, line, &l.body, Vec::new(), Vec::new());
        self.forget_assigned([&l.body], &[]);
    }

    /// Emits `head`, the body (with `prologue` first and `epilogue` after a `continue` target), and `}`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn loop_with_body(
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

    pub(crate) fn break_code(&mut self, label: Option<&syn::Lifetime>) -> Code {
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

    pub(crate) fn continue_code(&mut self, label: Option<&syn::Lifetime>) -> Code {
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

    pub(crate) fn for_stmt(&mut self, f: &syn::ExprForLoop) {
        let line = line_of(&f.expr);
        let pattern = match &*f.pat {
            Pat::Ident(pi) if pi.subpat.is_none() && pi.by_ref.is_none() => {
                Some((Some(pi.ident.to_string()), pi.mutability.is_some()))
            }
            Pat::Wild(_) => Some((None, false)),
            _ => None,
        };
        let (Some(iteration), Some((var_rust, var_mut))) = (iteration(&f.expr), pattern) else {
            // Rejected by validation: the body is still lowered, for its own errors.
            self.push_scope();
            self.declare_refused(&f.pat);
            let _ = self.capture(|l| l.block_stmts(&f.body, &Sink::Discard));
            self.pop_scope();
            return;
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
        // The loop variable's range, from the bounds as they are before the loop (Rust evaluates them once).
        let range = {
            let start = match start_expr {
                Some(s) => self.index_of(s),
                None => Some(self.bounds.constant(0)),
            };
            let end = self.index_of(end_expr);
            match (start, end) {
                (Some(s), Some(e)) => Some(self.bounds.range(s, e, inclusive, step_expr.is_none())),
                _ => None,
            }
        };
        self.forget_assigned([&f.body], &[]);
        let stable_end = is_stable(end_expr, &f.body);
        let stable_start = start_expr.is_none_or(|s| is_stable(s, &f.body));

        let hint = var_rust.as_deref().unwrap_or("i").trim_start_matches("r#").to_string();
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
            let id = if var_mut {
                // Assigning the variable must not change the iteration, as in Rust.
                let name = self.fresh_name(rust);
                let mut copy = ty_code.clone();
                copy.push_str(&format!(" {name} = {iter_name};"));
                prologue.push(copy);
                self.declare_named(rust, name, declared_ty, IndexValue::Unknown)
            } else {
                self.declare_named(rust, iter_name.clone(), declared_ty, IndexValue::Unknown)
            };
            self.locals[id].mutable = var_mut;
            if let Some(range) = range {
                let width = match &self.locals[id].ty {
                    Ty::Scalar(s) => crate::codegen::bounds::unsigned_bits(*s).map(crate::codegen::bounds::Width::Bits),
                    Ty::Var(v) => Some(crate::codegen::bounds::Width::Var(*v)),
                    _ => None,
                };
                if width.is_some() {
                    self.locals[id].shape = super::bounds::Shape::Int(range, width);
                }
            }
        }
        if !reverse && !grid && self.walks_tile_registers(end_expr) {
            self.emit_text("#pragma unroll");
        }
        self.loop_with_body(f.label.as_ref(), inclusive, head, line, &f.body, prologue, epilogue);
        self.pop_scope();
        self.forget_assigned([&f.body], &[]);
        if wrapped {
            self.indent -= 1;
            self.emit_text("}");
        }
    }
}

impl Lowerer<'_> {
    /// Whether a loop bound is `tile.len()` of a thread's share of a GEMM tile (`GemmTile`, `GemmTiles`). Its values
    /// stay in registers only while every index into them is a constant: a rolled loop over `tile.value(i)` moves
    /// the whole accumulator to local memory (616 bytes of stack in the TMA loop's epilogue, which then took about
    /// 45 µs per tile on an H100, 2026-12-05). Such a loop is emitted under `#pragma unroll`, which nvcc unrolls
    /// fully once `len()` is inlined to its constant and leaves rolled otherwise.
    fn walks_tile_registers(&self, bound: &Expr) -> bool {
        let Expr::MethodCall(m) = strip_paren(bound) else { return false };
        if m.method != "len" || !m.args.is_empty() {
            return false;
        }
        let Expr::Path(p) = strip_paren(&m.receiver) else { return false };
        let Some(id) = p.path.get_ident().and_then(|i| self.lookup(&i.to_string())) else { return false };
        let mut ty = &self.locals[id].ty;
        while let Ty::Ref(inner) = ty {
            ty = inner;
        }
        matches!(ty, Ty::Vocab(Vocab::GemmTile | Vocab::GemmTiles, _))
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
