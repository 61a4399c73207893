//! Expressions.

use syn::{BinOp, Expr, Lit, UnOp};

use super::code::Code;
use super::{line_of, Line, Lowerer};
use crate::codegen::bounds::SiteKind;
use crate::codegen::types::{Position, Scalar, Ty};
use crate::codegen::usage::IndexValue;

/// A lowered expression.
pub(crate) struct Val {
    pub(crate) code: Code,
    pub(crate) ty: Ty,
    /// What the value means as a resource index.
    pub(crate) index: IndexValue,
    /// Needs no parentheses as an operand.
    pub(crate) atom: bool,
}

impl Val {
    pub(crate) fn new(code: Code, ty: Ty) -> Val {
        Val { code, ty, index: IndexValue::Unknown, atom: true }
    }

    fn compound(code: Code, ty: Ty) -> Val {
        Val { code, ty, index: IndexValue::Unknown, atom: false }
    }

    /// The code, parenthesized unless it is an atom.
    pub(crate) fn operand(self) -> Code {
        if self.atom {
            self.code
        } else {
            self.code.parens()
        }
    }

    /// The code as an operand, keeping `self`.
    pub(crate) fn clone_operand(&self) -> Code {
        if self.atom {
            self.code.clone()
        } else {
            self.code.clone().parens()
        }
    }

    /// Placeholder after an error (already reported by `valid` or here): typed [`Ty::Error`], so nothing more is
    /// said about what uses it.
    pub(crate) fn error() -> Val {
        Val::new(Code::text("/* error */ 0"), Ty::Error)
    }
}

pub(crate) fn is_camel(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !is_screaming(name)
}

pub(crate) fn is_screaming(name: &str) -> bool {
    name.len() > 1
        && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        && name.chars().any(|c| c.is_ascii_uppercase())
}

/// Vocabulary constants (R15). A kernel cannot read other Rust constants: their values are not visible to the macro.
pub(crate) const VOCABULARY_CONSTANTS: &[&str] = &["WARP_SIZE"];

impl Lowerer<'_> {
    pub(crate) fn expr(&mut self, e: &Expr) -> Val {
        match e {
            Expr::Lit(l) => self.literal(&l.lit),
            Expr::Path(p) => self.path_value(p),
            Expr::Paren(p) => {
                let inner = self.expr(&p.expr);
                Val { code: inner.code.parens(), ty: inner.ty, index: inner.index, atom: true }
            }
            Expr::Group(g) => self.expr(&g.expr),
            Expr::Binary(b) => self.binary(b),
            Expr::Unary(u) => self.unary(u),
            Expr::Cast(c) => self.cast(c),
            Expr::Call(c) => self.call(c),
            Expr::MethodCall(m) => self.method_call(m),
            Expr::Index(i) => self.index(i),
            Expr::Field(f) => self.field(f),
            Expr::Assign(a) => {
                let place = self.expr(&a.left);
                if let Ty::Vocab(v, _) = &place.ty {
                    if v.is_session() {
                        self.cx.error_spanned_by(
                            a,
                            format!(
                                "a `{}` session cannot be reassigned: C++ can neither copy nor move one; open the new \
                                 session with its own `let`",
                                v.name()
                            ),
                        );
                        return Val::error();
                    }
                    if v.is_pinned() {
                        self.cx.error_spanned_by(
                            a,
                            format!(
                                "a `{}` cannot be reassigned ({}): make a new one with its own `let`",
                                v.name(),
                                v.why_pinned()
                            ),
                        );
                        return Val::error();
                    }
                }
                self.check_not_moved(&a.right);
                let value = self.expr(&a.right);
                self.flow_into(&place.ty, &value.ty);
                self.assigned(&a.left, Some(&a.right));
                let mut code = place.code;
                code.push_str(" = ").push(value.code);
                Val::compound(code, Ty::Unit)
            }
            Expr::Tuple(t) => {
                if t.elems.is_empty() {
                    return Val::new(Code::new(), Ty::Unit);
                }
                let vals: Vec<Val> = t
                    .elems
                    .iter()
                    .map(|e| {
                        self.check_not_moved(e);
                        self.expr(e)
                    })
                    .collect();
                let ty = Ty::Tuple(vals.iter().map(|v| v.ty.clone()).collect());
                let mut code = Code::text("weft_make_tuple(");
                code.push(Code::join(vals.into_iter().map(|v| v.code).collect(), ", "));
                code.push_str(")");
                Val::new(code, ty)
            }
            Expr::If(i) => self.if_value(i),
            Expr::Block(b) if b.label.is_none() && b.attrs.is_empty() => self.block_value(&b.block),
            Expr::Match(m) => self.match_value(m),
            Expr::Reference(r) => match &*r.expr {
                Expr::Index(i) if matches!(&*i.index, Expr::Range(_)) => self.subslice(i),
                // R13: C++ binds references implicitly.
                inner => {
                    let v = self.expr(inner);
                    // `&mut x` lends `x` to a callee (a device fn, an atomic) that may change it.
                    if r.mutability.is_some() {
                        self.assigned(inner, None);
                    }
                    v
                }
            },
            Expr::Return(_)
            | Expr::Break(_)
            | Expr::Continue(_)
            | Expr::While(_)
            | Expr::ForLoop(_)
            | Expr::Loop(_) => {
                // Control flow in value position: lowered as a GNU statement expression.
                let lines = self.capture(|l| l.expr_stmt(e));
                Val::new(statement_expression(lines, None), Ty::Unit)
            }
            _ => Val::error(),
        }
    }

    /// Lowers `e` where a value of type `expect` is needed.
    pub(crate) fn expr_expect(&mut self, e: &Expr, expect: &Ty) -> Val {
        let v = self.expr(e);
        self.flow_into(expect, &v.ty);
        v
    }

    /// A value of type `from` is stored where `to` is needed: literals take `to`'s type.
    pub(crate) fn flow_into(&mut self, to: &Ty, from: &Ty) {
        match (to, from) {
            (Ty::Unknown, f) => self.escape(f),
            (t, f) => self.unify(t, f),
        }
    }

    fn literal(&mut self, lit: &Lit) -> Val {
        match lit {
            Lit::Int(i) => {
                let digits = i.base10_digits().to_string();
                let value = digits.parse::<u64>().ok();
                let index = value.map_or(IndexValue::Unknown, IndexValue::Const);
                let suffix = i.suffix();
                let (code, ty) = if suffix.is_empty() {
                    let v = self.vars.fresh(false, self.origin());
                    (Code::literal(v, digits, false), Ty::Var(v))
                } else {
                    match Scalar::from_name(suffix) {
                        Some(s) => (Code::text(s.int_literal(&digits)), Ty::Scalar(s)),
                        None => (Code::text(digits), Ty::Unknown),
                    }
                };
                Val { code, ty, index, atom: true }
            }
            Lit::Float(f) => {
                let digits = f.base10_digits().to_string();
                match Scalar::from_name(f.suffix()) {
                    Some(s) => Val::new(Code::text(s.float_literal(&digits)), Ty::Scalar(s)),
                    None => {
                        let v = self.vars.fresh(true, self.origin());
                        Val::new(Code::literal(v, digits, true), Ty::Var(v))
                    }
                }
            }
            Lit::Bool(b) => Val::new(Code::text(if b.value { "true" } else { "false" }), Ty::Scalar(Scalar::Bool)),
            _ => Val::error(),
        }
    }

    fn binary(&mut self, b: &syn::ExprBinary) -> Val {
        let op = binop(&b.op);
        let lhs = self.expr(&b.left);
        // `a && b` evaluates `b` only where `a` holds (`a || b`: where it does not): what `a` says bounds `b`'s accesses.
        let rhs = match b.op {
            BinOp::And(_) | BinOp::Or(_) => {
                let (guards, narrowed) = self.guards_of(&b.left, matches!(b.op, BinOp::Or(_)));
                let depth = self.enter_guards(guards, narrowed);
                let rhs = self.expr(&b.right);
                self.leave_guards(depth);
                // What `b` assigns, it assigns only sometimes.
                self.forget_assigned_in(&b.right);
                rhs
            }
            _ => self.expr(&b.right),
        };
        match op.kind {
            OpKind::Arith => {
                self.unify_operands(&lhs.ty, &rhs.ty);
                let ty = known_of(&lhs.ty, &rhs.ty);
                let index = fold(&b.op, lhs.index, rhs.index);
                let mut code = lhs.operand();
                code.push_str(&format!(" {} ", op.text)).push(rhs.operand());
                promote_cast(code, ty, index)
            }
            OpKind::Shift => {
                let ty = lhs.ty.clone();
                let index = fold(&b.op, lhs.index, rhs.index);
                let mut code = lhs.operand();
                code.push_str(&format!(" {} ", op.text)).push(rhs.operand());
                promote_cast(code, ty, index)
            }
            OpKind::Compare => {
                self.unify_operands(&lhs.ty, &rhs.ty);
                for ty in [&lhs.ty, &rhs.ty] {
                    if !comparable(ty) {
                        self.cx.error_spanned_by(
                            b,
                            format!(
                                "C++ cannot compare {} with `{}`: compare numbers (a tuple's or `Team`'s fields) or \
                                 `Order`, `Scope`, `BarrierResult` values",
                                super::methods::describe(ty),
                                op.text
                            ),
                        );
                        return Val::error();
                    }
                }
                let mut code = lhs.operand();
                code.push_str(&format!(" {} ", op.text)).push(rhs.operand());
                Val::compound(code, Ty::Scalar(Scalar::Bool))
            }
            OpKind::Logic => {
                let mut code = lhs.operand();
                code.push_str(&format!(" {} ", op.text)).push(rhs.operand());
                Val::compound(code, Ty::Scalar(Scalar::Bool))
            }
            OpKind::CompoundArith => {
                self.flow_into(&lhs.ty, &rhs.ty);
                self.assigned(&b.left, None);
                let mut code = lhs.code;
                code.push_str(&format!(" {} ", op.text)).push(rhs.code);
                Val::compound(code, Ty::Unit)
            }
            OpKind::CompoundShift => {
                self.assigned(&b.left, None);
                let mut code = lhs.code;
                code.push_str(&format!(" {} ", op.text)).push(rhs.code);
                Val::compound(code, Ty::Unit)
            }
        }
    }

    /// Operands of an arithmetic operator or comparison have one type in Rust.
    pub(crate) fn unify_operands(&mut self, a: &Ty, b: &Ty) {
        match (a, b) {
            (Ty::Unknown, other) | (other, Ty::Unknown) => self.escape(other),
            _ => self.unify(a, b),
        }
    }

    fn unary(&mut self, u: &syn::ExprUnary) -> Val {
        let inner = self.expr(&u.expr);
        match u.op {
            UnOp::Neg(_) => {
                let ty = inner.ty.clone();
                let index = match inner.index {
                    IndexValue::Const(0) => IndexValue::Const(0),
                    _ => IndexValue::Unknown,
                };
                let mut code = Code::text("-");
                code.push(inner.operand());
                promote_cast(code, ty, index)
            }
            UnOp::Not(_) => {
                let ty = inner.ty.clone();
                match &ty {
                    Ty::Scalar(Scalar::Bool) => {
                        let mut code = Code::text("!");
                        code.push(inner.operand());
                        Val::compound(code, ty)
                    }
                    Ty::Scalar(s) if s.is_integer() => {
                        let mut code = Code::text("~");
                        code.push(inner.operand());
                        promote_cast(code, ty, IndexValue::Unknown)
                    }
                    Ty::Var(_) => {
                        let mut code = Code::text("~");
                        code.push(inner.operand());
                        promote_cast(code, ty, IndexValue::Unknown)
                    }
                    _ => {
                        // Unknown type: the prelude's overloads pick `!` for bool and `~` for integers.
                        let mut code = Code::text("weft_not(");
                        code.push(inner.code).push_str(")");
                        Val::new(code, ty)
                    }
                }
            }
            UnOp::Deref(_) => {
                // A device fn's `&mut x` parameter is a C++ reference: `*x` is `x`.
                let is_ref_param = matches!(&*u.expr, Expr::Path(p) if p.path.get_ident().and_then(|i| self.lookup(&i.to_string())).is_some_and(|id| matches!(self.locals[id].ty, Ty::Ref(_))));
                if !is_ref_param {
                    self.cx.error_spanned_by(
                        u,
                        "`*` is only needed on a device fn's `&mut` parameter here: kernels have no pointers; use \
                         the value directly",
                    );
                }
                inner
            }
            _ => Val::error(),
        }
    }

    fn cast(&mut self, c: &syn::ExprCast) -> Val {
        let inner = self.expr(&c.expr);
        let Some((cpp, ty)) = self.mapper().map(&c.ty, Position::Local) else { return Val::error() };
        if !matches!(ty, Ty::Scalar(_) | Ty::Param(_)) {
            self.cx.error_spanned_by(&c.ty, "`as` casts convert between number types only");
            return Val::error();
        }
        // A cast keeps what the value means as an index (`block_idx_x() as u32`).
        let index = inner.index;
        let mut code = Code::text(format!("static_cast<{cpp}>("));
        code.push(inner.code).push_str(")");
        Val { code, ty, index, atom: true }
    }

    fn index(&mut self, i: &syn::ExprIndex) -> Val {
        let base = self.expr(&i.expr);
        let indexable = matches!(base.ty, Ty::Indexable(..));
        let elem = match &base.ty {
            Ty::Indexable(_, e) => Some((**e).clone()),
            Ty::Error => Some(Ty::Error),
            _ => None,
        };
        let idx =
            if elem.is_some() { self.expr_expect(&i.index, &Ty::Scalar(Scalar::Usize)) } else { self.expr(&i.index) };
        let base = base.operand();
        let mut code = base.clone();
        code.push_str("[").push(idx.code.clone()).push_str("]");
        if indexable {
            let (len, parameter) = self.buffer_of(&i.expr);
            let index = self.index_of(&i.index);
            let site = self.site(i, SiteKind::Index, parameter, index, None, len);
            let mut checked = Code::text("weft::detail::at(");
            checked.push(base).push_str(", ").push(idx.code).push_str(&format!(", {})", line_of(i)));
            code = Code::site(vec![site], code, checked);
        }
        Val::new(code, elem.unwrap_or(Ty::Unknown))
    }

    /// `&x[a..b]` → `x.subslice(a, b)`; an open end is `0` or `x.len()`.
    fn subslice(&mut self, i: &syn::ExprIndex) -> Val {
        let Expr::Range(r) = &*i.index else { return Val::error() };
        let base = self.expr(&i.expr);
        let ty = match &base.ty {
            Ty::Indexable(c, e) => Ty::Indexable(*c, e.clone()),
            Ty::Error => Ty::Error,
            _ => Ty::Unknown,
        };
        let usize_ty = Ty::Scalar(Scalar::Usize);
        let start = match &r.start {
            Some(s) => self.expr_expect(s, &usize_ty).code,
            None => Code::text("0"),
        };
        let base_is_error = base.ty == Ty::Error;
        let base = base.operand();
        let end = match &r.end {
            Some(e) => self.expr_expect(e, &usize_ty).code,
            None => {
                let mut len = base.clone();
                len.push_str(".len()");
                len
            }
        };
        let mut code = base.clone();
        code.push_str(".subslice(").push(start.clone()).push_str(", ").push(end.clone()).push_str(")");
        if base_is_error {
            return Val::new(code, ty);
        }
        let (len, parameter) = self.buffer_of(&i.expr);
        let start_node = match &r.start {
            Some(s) => self.index_of(s),
            None => Some(self.bounds.constant(0)),
        };
        let end_node = match &r.end {
            Some(e) => self.index_of(e),
            None => len,
        };
        let site = self.site(i, SiteKind::Range, parameter, start_node, end_node, len);
        let mut checked = Code::text("weft::detail::subslice_at(");
        checked.push(base).push_str(", ").push(start).push_str(", ").push(end).push_str(&format!(", {})", line_of(i)));
        Val::new(Code::site(vec![site], code, checked), ty)
    }

    fn if_value(&mut self, i: &syn::ExprIf) -> Val {
        let cond = self.expr_expect(&i.cond, &Ty::Scalar(Scalar::Bool));
        let (guards, narrowed) = self.guards_of(&i.cond, false);
        let depth = self.enter_guards(guards, narrowed);
        let then = self.block_value(&i.then_branch);
        self.leave_guards(depth);
        let (guards, narrowed) = self.guards_of(&i.cond, true);
        let depth = self.enter_guards(guards, narrowed);
        let els = match &i.else_branch {
            Some((_, e)) => self.expr(e),
            None => Val::new(Code::text("(void)0"), Ty::Unit),
        };
        self.leave_guards(depth);
        // What one branch assigns, the other may not.
        self.forget_assigned_in(&Expr::If(i.clone()));
        self.unify(&then.ty, &els.ty);
        let ty = if matches!(then.ty, Ty::Unknown | Ty::Unit) { els.ty.clone() } else { then.ty.clone() };
        let mut code = cond.operand();
        code.push_str(" ? ").push(then.operand()).push_str(" : ").push(els.operand());
        Val::compound(code, ty)
    }

    /// A block in value position: its tail expression, or a statement expression `({ …; tail; })`.
    pub(crate) fn block_value(&mut self, b: &syn::Block) -> Val {
        if let [syn::Stmt::Expr(e, None)] = b.stmts.as_slice() {
            self.push_scope();
            let v = self.expr(e);
            self.pop_scope();
            return v;
        }
        self.push_scope();
        let (init, tail) = match b.stmts.split_last() {
            Some((syn::Stmt::Expr(e, None), init)) => (init, Some(e)),
            _ => (b.stmts.as_slice(), None),
        };
        let mut tail_val = None;
        let lines = self.capture(|l| {
            for s in init {
                l.stmt(s);
            }
            if let Some(t) = tail {
                tail_val = Some(l.expr(t));
            }
        });
        self.pop_scope();
        let ty = tail_val.as_ref().map(|v| v.ty.clone()).unwrap_or(Ty::Unit);
        Val::new(statement_expression(lines, tail_val.map(|v| v.code)), ty)
    }

    /// Runs `f` with a fresh line buffer and returns what it emitted.
    pub(crate) fn capture(&mut self, f: impl FnOnce(&mut Self)) -> Vec<Line> {
        let saved = std::mem::take(&mut self.lines);
        let indent = self.indent;
        self.indent = 0;
        f(self);
        self.indent = indent;
        std::mem::replace(&mut self.lines, saved)
    }
}

/// `({ stmt; stmt; tail; })` on one line (a GNU statement expression, which nvcc accepts).
pub(crate) fn statement_expression(lines: Vec<Line>, tail: Option<Code>) -> Code {
    let mut code = Code::text("({ ");
    for line in lines {
        code.push(line.code).push_str(" ");
    }
    if let Some(t) = tail {
        code.push(t).push_str("; ");
    }
    code.push_str("})");
    code
}

enum OpKind {
    Arith,
    Shift,
    Compare,
    Logic,
    CompoundArith,
    CompoundShift,
}

struct Op {
    text: &'static str,
    kind: OpKind,
}

fn binop(op: &BinOp) -> Op {
    use OpKind::*;
    let (text, kind) = match op {
        BinOp::Add(_) => ("+", Arith),
        BinOp::Sub(_) => ("-", Arith),
        BinOp::Mul(_) => ("*", Arith),
        BinOp::Div(_) => ("/", Arith),
        BinOp::Rem(_) => ("%", Arith),
        BinOp::BitAnd(_) => ("&", Arith),
        BinOp::BitOr(_) => ("|", Arith),
        BinOp::BitXor(_) => ("^", Arith),
        BinOp::Shl(_) => ("<<", Shift),
        BinOp::Shr(_) => (">>", Shift),
        BinOp::And(_) => ("&&", Logic),
        BinOp::Or(_) => ("||", Logic),
        BinOp::Eq(_) => ("==", Compare),
        BinOp::Ne(_) => ("!=", Compare),
        BinOp::Lt(_) => ("<", Compare),
        BinOp::Le(_) => ("<=", Compare),
        BinOp::Gt(_) => (">", Compare),
        BinOp::Ge(_) => (">=", Compare),
        BinOp::AddAssign(_) => ("+=", CompoundArith),
        BinOp::SubAssign(_) => ("-=", CompoundArith),
        BinOp::MulAssign(_) => ("*=", CompoundArith),
        BinOp::DivAssign(_) => ("/=", CompoundArith),
        BinOp::RemAssign(_) => ("%=", CompoundArith),
        BinOp::BitAndAssign(_) => ("&=", CompoundArith),
        BinOp::BitOrAssign(_) => ("|=", CompoundArith),
        BinOp::BitXorAssign(_) => ("^=", CompoundArith),
        BinOp::ShlAssign(_) => ("<<=", CompoundShift),
        BinOp::ShrAssign(_) => (">>=", CompoundShift),
        _ => ("/* ? */", Arith),
    };
    Op { text, kind }
}

/// Whether C++ has the comparison operators for values of this type: numbers and the vocabulary's enums; not
/// tuples, teams, coops, GIN actions (which derive `PartialEq` in Rust).
fn comparable(ty: &Ty) -> bool {
    use crate::codegen::types::Vocab;
    match ty {
        Ty::Vocab(v, _) => matches!(v, Vocab::Order | Vocab::Scope | Vocab::BarrierResult),
        Ty::Ref(inner) => comparable(inner),
        Ty::Tuple(_) | Ty::Window(_) | Ty::Indexable(..) | Ty::DevComm | Ty::Unit => false,
        Ty::Scalar(_) | Ty::Param(_) | Ty::Var(_) | Ty::Local(_) | Ty::Unknown | Ty::Error => true,
    }
}

/// The more informative of two operand types.
fn known_of(a: &Ty, b: &Ty) -> Ty {
    match (a, b) {
        // Vocabulary values with operators (`WidePack<T> * f32`) keep their type.
        (Ty::Error, _) | (_, Ty::Error) => Ty::Error,
        (Ty::Vocab(..), _) => a.clone(),
        (_, Ty::Vocab(..)) => b.clone(),
        (Ty::Scalar(_) | Ty::Param(_), _) => a.clone(),
        (_, Ty::Scalar(_) | Ty::Param(_)) => b.clone(),
        (Ty::Var(_), _) => a.clone(),
        (_, Ty::Var(_)) => b.clone(),
        (Ty::Local(_), _) => a.clone(),
        _ => b.clone(),
    }
}

/// Constant folding for resource indices (`2 * 3`), and `block_idx_x() + 0`-style identities.
fn fold(op: &BinOp, a: IndexValue, b: IndexValue) -> IndexValue {
    use IndexValue::*;
    match (a, b) {
        (Const(x), Const(y)) => match op {
            BinOp::Add(_) => x.checked_add(y).map_or(Unknown, Const),
            BinOp::Sub(_) => x.checked_sub(y).map_or(Unknown, Const),
            BinOp::Mul(_) => x.checked_mul(y).map_or(Unknown, Const),
            BinOp::Div(_) if y != 0 => Const(x / y),
            BinOp::Rem(_) if y != 0 => Const(x % y),
            BinOp::Shl(_) if y < 64 => x.checked_shl(y as u32).map_or(Unknown, Const),
            BinOp::Shr(_) if y < 64 => Const(x >> y),
            BinOp::BitAnd(_) => Const(x & y),
            BinOp::BitOr(_) => Const(x | y),
            BinOp::BitXor(_) => Const(x ^ y),
            _ => Unknown,
        },
        (Block(axis), Const(0)) if matches!(op, BinOp::Add(_) | BinOp::Sub(_)) => Block(axis),
        (Const(0), Block(axis)) if matches!(op, BinOp::Add(_)) => Block(axis),
        (Block(axis), Const(1)) if matches!(op, BinOp::Mul(_) | BinOp::Div(_)) => Block(axis),
        _ => Unknown,
    }
}

/// C++ promotes 8- and 16-bit integers to `int`; cast the result back so it keeps Rust's type.
fn promote_cast(code: Code, ty: Ty, index: IndexValue) -> Val {
    match &ty {
        Ty::Scalar(s) if s.promotes() => {
            let mut out = Code::text(format!("static_cast<{}>(", s.cpp()));
            out.push(code).push_str(")");
            Val { code: out, ty, index, atom: true }
        }
        // Known only once the literal's type is: decided when rendering.
        Ty::Var(v) => Val { code: Code::promote(*v, code), ty, index, atom: false },
        _ => Val { code, ty, index, atom: false },
    }
}
