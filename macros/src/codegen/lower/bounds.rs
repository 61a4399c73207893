//! The lowering's half of the bounds analysis (`codegen::bounds` says what is proven and why): what each local holds
//! (an integer's range, a buffer's length, a window, a team, a condition decided at launch), the conditions around
//! each access, and the accesses ("sites") themselves.

use std::collections::BTreeSet;

use quote::ToTokens;
use syn::visit::Visit;
use syn::{BinOp, Expr, UnOp};

use super::Lowerer;
use crate::codegen::ast::{FnKind, ParamKind};
use crate::codegen::bounds::{
    unsigned_bits, Atom, Axis, Cond, CondId, ElemType, NodeId, Op, Rel, Site, SiteId, SiteKind, TeamKind, Width,
};
use crate::codegen::types::{Container, Scalar, Ty};

/// What the analysis knows of a value.
#[derive(Clone, Debug, Default)]
pub(crate) enum Shape {
    #[default]
    None,
    /// An unsigned integer: its range, and its type's width (`None` for an unsuffixed literal, which takes the
    /// width of what it meets).
    Int(NodeId, Option<Width>),
    /// A `bool` decided at launch.
    Bool(CondId),
    /// A slice, window view, shared array or sub-slice: its length, if known, and the parameter (or shared array)
    /// it comes from.
    Buffer {
        len: Option<NodeId>,
        parameter: String,
    },
    /// A window: its length and the parameter it comes from.
    Window {
        len: NodeId,
        parameter: String,
    },
    Team(TeamKind),
}

/// One condition around the code being lowered (a conjunct of an `if`'s or `while`'s condition, or what an earlier
/// early exit implies).
#[derive(Clone, Debug, Default)]
pub(crate) struct Guard {
    /// The condition, when it is decided at launch: accesses under it are checked only if it holds.
    host: Option<CondId>,
    /// The variables of the locals it narrows (`i < n` narrows `i`): accesses indexed by them stay exact.
    refined: BTreeSet<u32>,
    /// The thread and loop variables it mentions (outside loads, whose values are data).
    vars: BTreeSet<u32>,
    /// It mentions a value the analysis does not follow (a mutable local it does not narrow, a value of unknown
    /// origin): no bound under it is exact.
    opaque: bool,
    /// `a != b`: it excludes values without hiding the largest one (but for one value).
    selector: bool,
}

impl Guard {
    /// A condition about which nothing is known.
    pub(crate) fn opaque() -> Guard {
        Guard { opaque: true, ..Guard::default() }
    }
}

/// What a condition operand mentions.
#[derive(Default)]
struct Mentions {
    vars: BTreeSet<u32>,
    opaque: bool,
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Paren(p) => strip(&p.expr),
        Expr::Group(g) => strip(&g.expr),
        other => other,
    }
}

/// The width of a scalar type, if it is an unsigned integer.
fn width_of_ty(ty: &Ty) -> Option<Width> {
    match ty {
        Ty::Scalar(s) => unsigned_bits(*s).map(Width::Bits),
        Ty::Var(v) => Some(Width::Var(*v)),
        _ => None,
    }
}

/// `x` as source text, for messages (`x.lsa(peer)[i]`): from its tokens, since a span covers only the first token
/// on stable Rust.
pub(crate) fn source_text<T: ToTokens>(node: &T) -> String {
    let mut text = node.to_token_stream().to_string();
    for (from, to) in [
        (" [", "["),
        ("[ ", "["),
        (" ]", "]"),
        (" (", "("),
        ("( ", "("),
        (" )", ")"),
        (" . ", "."),
        (" .. ", ".."),
        (" ,", ","),
        (" ::", "::"),
        (":: ", "::"),
        ("& ", "&"),
        ("< ", "<"),
        (" >", ">"),
    ] {
        text = text.replace(from, to);
    }
    text
}

impl Lowerer<'_> {
    /// Whether the values of this function's parameters and of the launch are known on the host (a kernel's are).
    fn on_host(&self) -> bool {
        self.sig.kind == FnKind::Kernel
    }

    pub(crate) fn atom(&mut self, atom: Atom) -> NodeId {
        let host = match &atom {
            Atom::Const(_) => true,
            // The host reads team values from the device communicator (the LSA team also from a window's).
            Atom::TeamSize(team) | Atom::TeamRank(team) => {
                let has = |f: fn(&ParamKind) -> bool| self.sig.params.iter().any(|p| f(&p.kind));
                self.on_host()
                    && (has(|k| matches!(k, ParamKind::DevComm { .. }))
                        || (*team == TeamKind::Lsa && has(|k| matches!(k, ParamKind::Window { .. }))))
            }
            _ => self.on_host(),
        };
        self.bounds.atom(atom, host)
    }

    /// The shapes of the parameters, once they are declared.
    pub(crate) fn param_shapes(&mut self) {
        for p in &self.sig.params.clone() {
            let Some(id) = self.lookup(&p.ident.to_string()) else { continue };
            let name = p.ident.to_string();
            let shape = match &p.kind {
                ParamKind::Slice { .. } => {
                    Shape::Buffer { len: Some(self.atom(Atom::Len(name.clone()))), parameter: name }
                }
                ParamKind::Window { .. } => Shape::Window { len: self.atom(Atom::Len(name.clone())), parameter: name },
                ParamKind::Scalar { .. } => match width_of_ty(&p.ty) {
                    Some(w) => Shape::Int(self.atom(Atom::Scalar(name)), Some(w)),
                    None => Shape::None,
                },
                _ => Shape::None,
            };
            self.locals[id].shape = shape;
        }
    }

    /// The shape of local `id` where the lowering is (a narrowing condition around it may apply).
    pub(crate) fn local_shape(&self, id: usize) -> Shape {
        self.overrides
            .iter()
            .rev()
            .find(|(l, _)| *l == id)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| self.locals[id].shape.clone())
    }

    /// Sets what local `id` holds from here on (an assignment, or a loop making it loop-carried).
    pub(crate) fn set_local_shape(&mut self, id: usize, shape: Shape) {
        self.overrides.retain(|(l, _)| *l != id);
        self.locals[id].shape = shape;
    }

    /// Every mutable local that `parts` assign becomes untracked (at a loop's head, and after a loop or branch):
    /// bounded again only where a condition narrows it. Its value depends on what was assigned to it and under
    /// which conditions (`conditions`: those around every part, such as an `if`'s).
    pub(crate) fn forget_assigned<'a>(
        &mut self,
        parts: impl IntoIterator<Item = &'a syn::Block>,
        conditions: &[&Expr],
    ) {
        let mut finder = Assigned::default();
        for b in parts {
            finder.visit_block(b);
        }
        self.forget_found(finder, conditions);
    }

    /// [`Self::forget_assigned`] for the locals an expression assigns (a `while` condition, an `if` value).
    pub(crate) fn forget_assigned_in(&mut self, e: &Expr) {
        let mut finder = Assigned::default();
        finder.visit_expr(e);
        self.forget_found(finder, &[]);
    }

    fn forget_found(&mut self, finder: Assigned, conditions: &[&Expr]) {
        for (name, sources) in finder.found {
            let Some(id) = self.lookup(&name) else { continue };
            let mut m = Mentions::default();
            for e in sources.iter().chain(conditions.iter().copied()) {
                self.mentions(e, &mut m);
            }
            let shape = match width_of_ty(&self.locals[id].ty) {
                Some(w) => {
                    let host = self.on_host();
                    Shape::Int(self.bounds.unbounded(&m.vars, host), Some(w))
                }
                None => Shape::None,
            };
            self.set_local_shape(id, shape);
        }
    }

    /// `target = value` (`value: None` for `+=` and the like): what the local holds from here on.
    pub(crate) fn assigned(&mut self, target: &Expr, value: Option<&Expr>) {
        let Expr::Path(p) = strip(target) else { return };
        let Some(id) = p.path.get_ident().and_then(|i| self.lookup(&i.to_string())) else { return };
        let Some(width) = width_of_ty(&self.locals[id].ty) else {
            self.set_local_shape(id, Shape::None);
            return;
        };
        let shape = match value.map(|v| self.shape(v)) {
            Some(Shape::Int(n, w)) => Shape::Int(n, w.or(Some(width))),
            _ => {
                let mut m = Mentions::default();
                self.mentions(target, &mut m);
                if let Some(v) = value {
                    self.mentions(v, &mut m);
                }
                let host = self.on_host();
                Shape::Int(self.bounds.unbounded(&m.vars, host), Some(width))
            }
        };
        self.set_local_shape(id, shape);
    }

    fn int(&mut self, e: &Expr) -> Option<(NodeId, Option<Width>)> {
        match self.shape(e) {
            Shape::Int(n, w) => Some((n, w)),
            _ => None,
        }
    }

    fn cond_of(&mut self, e: &Expr) -> Option<CondId> {
        match self.shape(e) {
            Shape::Bool(c) => Some(c),
            _ => None,
        }
    }

    /// What the analysis knows of `e`'s value.
    pub(crate) fn shape(&mut self, e: &Expr) -> Shape {
        let int = |n: NodeId, bits: u32| Shape::Int(n, Some(Width::Bits(bits)));
        match strip(e) {
            Expr::Lit(l) => match &l.lit {
                syn::Lit::Int(i) => {
                    let Ok(value) = i.base10_parse::<u128>() else { return Shape::None };
                    let width = match i.suffix() {
                        "" => None,
                        suffix => match Scalar::from_name(suffix).and_then(unsigned_bits) {
                            Some(bits) => Some(Width::Bits(bits)),
                            None => return Shape::None,
                        },
                    };
                    Shape::Int(self.bounds.constant(value), width)
                }
                syn::Lit::Bool(b) => Shape::Bool(self.bounds.condition(Cond::Const(b.value))),
                _ => Shape::None,
            },
            Expr::Path(p) => match p.path.get_ident() {
                Some(ident) if p.qself.is_none() => match self.lookup(&ident.to_string()) {
                    Some(id) => self.local_shape(id),
                    None if ident == "WARP_SIZE" => int(self.bounds.constant(32), 32),
                    None => Shape::None,
                },
                _ => Shape::None,
            },
            Expr::Binary(b) => self.binary_shape(b),
            Expr::Unary(u) if matches!(u.op, UnOp::Not(_)) => match self.cond_of(&u.expr) {
                Some(c) => Shape::Bool(self.bounds.condition(Cond::Not(c))),
                None => Shape::None,
            },
            Expr::Cast(c) => {
                let target = match &*c.ty {
                    syn::Type::Path(t) => t.path.get_ident().and_then(|i| Scalar::from_name(&i.to_string())),
                    _ => None,
                };
                match (target.and_then(unsigned_bits), self.int(&c.expr)) {
                    (Some(bits), Some((n, _))) => int(self.bounds.cast(n, Width::Bits(bits)), bits),
                    _ => Shape::None,
                }
            }
            Expr::MethodCall(m) => self.method_shape(m),
            Expr::Call(c) => self.call_shape(c),
            Expr::Field(f) => match (self.shape(&f.base), &f.member) {
                (Shape::Team(team), syn::Member::Named(field)) if field == "nranks" => {
                    int(self.atom(Atom::TeamSize(team)), 32)
                }
                (Shape::Team(team), syn::Member::Named(field)) if field == "rank" => {
                    int(self.atom(Atom::TeamRank(team)), 32)
                }
                _ => Shape::None,
            },
            Expr::Reference(r) => match strip(&r.expr) {
                Expr::Index(i) => match strip(&i.index) {
                    Expr::Range(range) => self.subslice_shape(&i.expr, range),
                    _ => Shape::None,
                },
                inner => self.shape(inner),
            },
            Expr::If(i) => {
                let (Some(syn::Stmt::Expr(then, None)), Some((_, otherwise))) =
                    (i.then_branch.stmts.first().filter(|_| i.then_branch.stmts.len() == 1), &i.else_branch)
                else {
                    return Shape::None;
                };
                let otherwise = match strip(otherwise) {
                    Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
                        syn::Stmt::Expr(e, None) => e,
                        _ => return Shape::None,
                    },
                    other => other,
                };
                let cond = self.cond_of(&i.cond);
                match (self.int(then), self.int(otherwise)) {
                    (Some((a, wa)), Some((b, wb))) => {
                        let node = match cond {
                            Some(c) => self.bounds.pick(c, a, b),
                            None => self.bounds.join(a, b),
                        };
                        Shape::Int(node, wa.or(wb))
                    }
                    _ => Shape::None,
                }
            }
            Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
                syn::Stmt::Expr(e, None) => self.shape(e),
                _ => Shape::None,
            },
            _ => Shape::None,
        }
    }

    fn binary_shape(&mut self, b: &syn::ExprBinary) -> Shape {
        let op = match b.op {
            BinOp::Add(_) => Op::Add,
            BinOp::Sub(_) => Op::Sub,
            BinOp::Mul(_) => Op::Mul,
            BinOp::Div(_) => Op::Div,
            BinOp::Rem(_) => Op::Rem,
            BinOp::BitAnd(_) => Op::BitAnd,
            BinOp::BitOr(_) | BinOp::BitXor(_) => Op::BitOr,
            BinOp::Shl(_) => Op::Shl,
            BinOp::Shr(_) => Op::Shr,
            BinOp::And(_) | BinOp::Or(_) => {
                let (Some(x), Some(y)) = (self.cond_of(&b.left), self.cond_of(&b.right)) else { return Shape::None };
                let c = if matches!(b.op, BinOp::And(_)) { Cond::And(x, y) } else { Cond::Or(x, y) };
                return Shape::Bool(self.bounds.condition(c));
            }
            _ => return self.comparison_shape(b),
        };
        let (Some((x, wx)), Some((y, wy))) = (self.int(&b.left), self.int(&b.right)) else { return Shape::None };
        let width = if matches!(op, Op::Shl | Op::Shr) { wx } else { wx.or(wy) };
        Shape::Int(self.bounds.op(op, x, y, width.unwrap_or(Width::Bits(64))), width)
    }

    /// A comparison of two values decided at launch.
    fn comparison_shape(&mut self, b: &syn::ExprBinary) -> Shape {
        let rel = match b.op {
            BinOp::Lt(_) => Some(Rel::Lt),
            BinOp::Le(_) => Some(Rel::Le),
            BinOp::Gt(_) => Some(Rel::Gt),
            BinOp::Ge(_) => Some(Rel::Ge),
            BinOp::Eq(_) => Some(Rel::Eq),
            BinOp::Ne(_) => None,
            _ => return Shape::None,
        };
        let (Some((x, _)), Some((y, _))) = (self.int(&b.left), self.int(&b.right)) else { return Shape::None };
        if !(self.bounds.info(x).uniform && self.bounds.info(y).uniform) {
            return Shape::None;
        }
        let cond = match rel {
            Some(rel) => Cond::Cmp(rel, x, y),
            None => Cond::Ne(x, y),
        };
        Shape::Bool(self.bounds.condition(cond))
    }

    fn method_shape(&mut self, m: &syn::ExprMethodCall) -> Shape {
        let name = m.method.to_string();
        let args: Vec<&Expr> = m.args.iter().collect();
        let receiver_ty = match strip(&m.receiver) {
            Expr::Path(p) => {
                p.path.get_ident().and_then(|i| self.lookup(&i.to_string())).map(|id| self.locals[id].ty.clone())
            }
            _ => None,
        };
        if receiver_ty == Some(Ty::DevComm) {
            let int = |l: &mut Self, atom: Atom| Shape::Int(l.atom(atom), Some(Width::Bits(32)));
            return match (name.as_str(), args.len()) {
                ("lsa_size", 0) => int(self, Atom::TeamSize(TeamKind::Lsa)),
                ("lsa_rank", 0) => int(self, Atom::TeamRank(TeamKind::Lsa)),
                ("nranks", 0) => int(self, Atom::TeamSize(TeamKind::World)),
                ("rank", 0) => int(self, Atom::TeamRank(TeamKind::World)),
                ("lsa", 0) => Shape::Team(TeamKind::Lsa),
                ("world", 0) => Shape::Team(TeamKind::World),
                ("rail", 0) => Shape::Team(TeamKind::Rail),
                _ => Shape::None,
            };
        }
        let receiver = self.shape(&m.receiver);
        match (receiver, name.as_str(), args.len()) {
            (Shape::Buffer { len: Some(len), .. }, "len", 0) | (Shape::Window { len, .. }, "len", 0) => {
                Shape::Int(len, Some(Width::Bits(64)))
            }
            (Shape::Window { len, parameter }, "local" | "lsa" | "peer", _) => {
                Shape::Buffer { len: Some(len), parameter }
            }
            (Shape::Window { len, parameter }, "offset", 1) => match self.int(args[0]) {
                Some((k, _)) => Shape::Window { len: self.bounds.op(Op::SatSub, len, k, Width::Bits(64)), parameter },
                None => Shape::None,
            },
            (Shape::Buffer { len, parameter }, "as_slice" | "as_mut_slice", 0) => Shape::Buffer { len, parameter },
            (Shape::Int(a, wa), "min" | "max" | "div_ceil", 1) => match self.int(args[0]) {
                Some((b, wb)) => {
                    let op = match name.as_str() {
                        "min" => Op::Min,
                        "max" => Op::Max,
                        _ => Op::DivCeil,
                    };
                    let width = wa.or(wb);
                    Shape::Int(self.bounds.op(op, a, b, width.unwrap_or(Width::Bits(64))), width)
                }
                None => Shape::None,
            },
            _ => Shape::None,
        }
    }

    fn call_shape(&mut self, c: &syn::ExprCall) -> Shape {
        let Expr::Path(p) = &*c.func else { return Shape::None };
        let Some(last) = p.path.segments.last() else { return Shape::None };
        let name = last.ident.to_string();
        let int = |l: &mut Self, atom: Atom, bits: u32| Shape::Int(l.atom(atom), Some(Width::Bits(bits)));
        let axis = |suffix: &str| match suffix {
            "x" => Some(Axis::X),
            "y" => Some(Axis::Y),
            "z" => Some(Axis::Z),
            _ => None,
        };
        if !c.args.is_empty() {
            return match (name.as_str(), c.args.len()) {
                ("min" | "max", 2) => {
                    let (Some((a, wa)), Some((b, wb))) = (self.int(&c.args[0]), self.int(&c.args[1])) else {
                        return Shape::None;
                    };
                    let op = if name == "min" { Op::Min } else { Op::Max };
                    let width = wa.or(wb);
                    Shape::Int(self.bounds.op(op, a, b, width.unwrap_or(Width::Bits(64))), width)
                }
                _ => Shape::None,
            };
        }
        if let Some((prefix, suffix)) = name.rsplit_once('_') {
            if let Some(axis) = axis(suffix) {
                return match prefix {
                    "thread_idx" => int(self, Atom::ThreadIdx(axis), 32),
                    "block_idx" => int(self, Atom::BlockIdx(axis), 32),
                    "block_dim" => int(self, Atom::BlockDim(axis), 32),
                    "grid_dim" => int(self, Atom::GridDim(axis), 32),
                    _ => Shape::None,
                };
            }
        }
        match name.as_str() {
            "index_1d" => int(self, Atom::Index1d, 64),
            "grid_size_1d" => int(self, Atom::GridSize1d, 64),
            "lane_id" => int(self, Atom::LaneId, 32),
            "warp_id" => int(self, Atom::WarpId, 32),
            "pack_lanes" => match self.elem_of_turbofish(&last.arguments) {
                Some(elem) => int(self, Atom::Lanes(elem), 64),
                None => Shape::None,
            },
            _ => Shape::None,
        }
    }

    /// The element type of `::<T>`.
    pub(crate) fn elem_of_turbofish(&self, args: &syn::PathArguments) -> Option<ElemType> {
        let syn::PathArguments::AngleBracketed(a) = args else { return None };
        match a.args.first()? {
            syn::GenericArgument::Type(t) => self.elem_type(t),
            _ => None,
        }
    }

    /// An element type named in the source (`T`, `f32`, `bf16`).
    pub(crate) fn elem_type(&self, t: &syn::Type) -> Option<ElemType> {
        let syn::Type::Path(p) = t else { return None };
        let name = p.path.segments.last()?.ident.to_string();
        if self.sig.generic_names.elements.contains(&name) {
            return Some(ElemType::Param(name));
        }
        Scalar::from_name(&name).map(ElemType::Scalar)
    }

    /// An element type as the lowering types it (`Ty::Param("T")`, `Ty::Scalar(F32)`).
    pub(crate) fn elem_of_ty(ty: &Ty) -> Option<ElemType> {
        match ty {
            Ty::Scalar(s) => Some(ElemType::Scalar(*s)),
            Ty::Param(p) => Some(ElemType::Param(p.clone())),
            _ => None,
        }
    }

    /// `&x[a..b]`: a buffer of `b - a` elements (known only when both ends are the same on every thread; sub-slices
    /// that move with the thread have a length the analysis does not follow).
    fn subslice_shape(&mut self, base: &Expr, range: &syn::ExprRange) -> Shape {
        let Shape::Buffer { len, parameter } = self.shape(base) else { return Shape::None };
        let start = match &range.start {
            Some(s) => self.int(s).map(|(n, _)| n),
            None => Some(self.bounds.constant(0)),
        };
        let end = match &range.end {
            Some(e) => self.int(e).map(|(n, _)| n),
            None => len,
        };
        let len = match (start, end) {
            (Some(s), Some(e)) if self.bounds.info(s).uniform && self.bounds.info(e).uniform => {
                Some(self.bounds.op(Op::SatSub, e, s, Width::Bits(64)))
            }
            _ => None,
        };
        Shape::Buffer { len, parameter }
    }

    /// What a condition operand mentions, for [`Guard`]s: the variables of the locals it names (outside loads and
    /// calls, whose results are data), and whether it names a mutable local the analysis has lost.
    fn mentions(&mut self, e: &Expr, out: &mut Mentions) {
        match strip(e) {
            Expr::Path(p) => {
                if let Some(id) = p.path.get_ident().and_then(|i| self.lookup(&i.to_string())) {
                    match self.local_shape(id) {
                        Shape::Int(n, _) => out.vars.extend(self.bounds.info(n).vars.iter().copied()),
                        Shape::Bool(_) => {}
                        _ => out.opaque |= self.locals[id].mutable,
                    }
                }
            }
            Expr::Binary(b) => {
                self.mentions(&b.left, out);
                self.mentions(&b.right, out);
            }
            Expr::Unary(u) => self.mentions(&u.expr, out),
            Expr::Cast(c) => self.mentions(&c.expr, out),
            Expr::MethodCall(m) if m.args.is_empty() => {
                if let Shape::Int(n, _) = self.shape(e) {
                    out.vars.extend(self.bounds.info(n).vars.iter().copied());
                }
            }
            Expr::Call(_) | Expr::MethodCall(_) => {
                if let Shape::Int(n, _) = self.shape(e) {
                    out.vars.extend(self.bounds.info(n).vars.iter().copied());
                }
            }
            // Loads and literals: data, or nothing.
            _ => {}
        }
    }

    /// The guards a condition puts around the code it controls (`negate`: the code runs when it is false), and the
    /// locals it narrows there.
    pub(crate) fn guards_of(&mut self, cond: &Expr, negate: bool) -> (Vec<Guard>, Vec<(usize, Shape)>) {
        let mut guards = Vec::new();
        let mut narrowed = Vec::new();
        self.conjuncts(cond, negate, &mut guards, &mut narrowed);
        (guards, narrowed)
    }

    fn conjuncts(&mut self, cond: &Expr, negate: bool, guards: &mut Vec<Guard>, narrowed: &mut Vec<(usize, Shape)>) {
        let cond = strip(cond);
        if let Some(c) = self.cond_of(cond) {
            let c = if negate { self.bounds.condition(Cond::Not(c)) } else { c };
            guards.push(Guard { host: Some(c), ..Guard::default() });
            return;
        }
        match cond {
            // `a && b`, or `!(a || b)`: each part holds.
            Expr::Binary(b) if matches!((&b.op, negate), (BinOp::And(_), false) | (BinOp::Or(_), true)) => {
                self.conjuncts(&b.left, negate, guards, narrowed);
                self.conjuncts(&b.right, negate, guards, narrowed);
            }
            Expr::Unary(u) if matches!(u.op, UnOp::Not(_)) => self.conjuncts(&u.expr, !negate, guards, narrowed),
            Expr::Binary(b) => {
                let rel = match b.op {
                    BinOp::Lt(_) => Some(Rel::Lt),
                    BinOp::Le(_) => Some(Rel::Le),
                    BinOp::Gt(_) => Some(Rel::Gt),
                    BinOp::Ge(_) => Some(Rel::Ge),
                    BinOp::Eq(_) => Some(Rel::Eq),
                    _ => None,
                };
                let is_ne = matches!(b.op, BinOp::Ne(_));
                let mut guard = Guard { selector: is_ne && !negate, ..Guard::default() };
                // `x rel e` (or `e rel x`) for a local `x`: narrow `x` where the code runs.
                let rel = match (rel, negate, is_ne) {
                    (Some(r), false, _) => Some(r),
                    (Some(r), true, _) => r.negate(),
                    (None, true, true) => Some(Rel::Eq),
                    _ => None,
                };
                let mut narrowed_side = None;
                if let Some(rel) = rel {
                    for (side, local, other, rel) in [(0, &b.left, &b.right, rel), (1, &b.right, &b.left, rel.flip())] {
                        if let Some((id, old, shape)) = self.narrow(local, other, rel) {
                            guard.refined.extend(self.bounds.own_vars(old));
                            narrowed.push((id, shape));
                            narrowed_side = Some(side);
                            break;
                        }
                    }
                }
                // What the condition mentions; the narrowed local is tracked again, so it is no reason for doubt.
                for (side, operand) in [(0, &b.left), (1, &b.right)] {
                    let mut m = Mentions::default();
                    self.mentions(operand, &mut m);
                    guard.vars.extend(m.vars);
                    guard.opaque |= m.opaque && narrowed_side != Some(side);
                }
                guards.push(guard);
            }
            other => {
                let mut m = Mentions::default();
                self.mentions(other, &mut m);
                guards.push(Guard { vars: m.vars, opaque: m.opaque, ..Guard::default() });
            }
        }
    }

    /// `local rel other` for a local integer: its id, its old node and its narrowed shape.
    fn narrow(&mut self, local: &Expr, other: &Expr, rel: Rel) -> Option<(usize, NodeId, Shape)> {
        let Expr::Path(p) = strip(local) else { return None };
        let id = self.lookup(&p.path.get_ident()?.to_string())?;
        let Shape::Int(node, width) = self.local_shape(id) else { return None };
        let (bound, _) = self.int(other)?;
        if !self.bounds.info(bound).bounded && matches!(rel, Rel::Lt | Rel::Le | Rel::Eq) {
            return None;
        }
        let narrowed = self.bounds.refine(rel, node, bound);
        Some((id, node, Shape::Int(narrowed, width)))
    }

    /// The condition of a `match` arm: the scrutinee (and the arm's guard) take some value; the analysis follows
    /// neither patterns nor guards, so bounds under it are exact only if they do not move with what it mentions.
    pub(crate) fn arm_guard(&mut self, scrutinee: &Expr, arm: &syn::Arm) -> Guard {
        let mut m = Mentions::default();
        self.mentions(scrutinee, &mut m);
        if let Some((_, g)) = &arm.guard {
            self.mentions(g, &mut m);
        }
        Guard { vars: m.vars, opaque: m.opaque, ..Guard::default() }
    }

    /// Enters code under `guards`, with `narrowed` locals; returns the depths to restore with [`Self::leave_guards`].
    pub(crate) fn enter_guards(&mut self, guards: Vec<Guard>, narrowed: Vec<(usize, Shape)>) -> (usize, usize) {
        let depth = (self.guards.len(), self.overrides.len());
        self.guards.extend(guards);
        self.overrides.extend(narrowed);
        depth
    }

    pub(crate) fn leave_guards(&mut self, depth: (usize, usize)) {
        self.guards.truncate(depth.0);
        self.overrides.truncate(depth.1);
    }

    /// Records an access; the lowering emits it through [`super::code::Code::site`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn site<T: ToTokens>(
        &mut self,
        node: &T,
        kind: SiteKind,
        parameter: String,
        index: Option<NodeId>,
        end: Option<NodeId>,
        len: Option<NodeId>,
    ) -> SiteId {
        let mut vars: BTreeSet<u32> = BTreeSet::new();
        for n in [index, end].into_iter().flatten() {
            vars.extend(self.bounds.info(n).vars.iter().copied());
        }
        let mut guards = Vec::new();
        let mut exact = true;
        for g in &self.guards {
            match g.host {
                Some(c) => guards.push(c),
                None => {
                    let keeps = !g.opaque && (g.vars.is_disjoint(&vars) || !g.refined.is_disjoint(&vars) || g.selector);
                    exact &= keeps;
                }
            }
        }
        self.bounds.add_site(Site {
            kind,
            parameter,
            access: source_text(node),
            line: u32::try_from(super::line_of(node)).unwrap_or(0),
            tokens: node.to_token_stream(),
            index,
            end,
            len,
            guards,
            context_exact: exact,
        })
    }

    /// The buffer an access goes through: its length and name (`None`: not one the analysis follows).
    pub(crate) fn buffer_of(&mut self, e: &Expr) -> (Option<NodeId>, String) {
        match self.shape(e) {
            Shape::Buffer { len, parameter } => (len, parameter),
            Shape::Window { len, parameter } => (Some(len), parameter),
            _ => (None, source_text(e)),
        }
    }

    /// The index node of an expression, if it is an unsigned integer the analysis follows.
    pub(crate) fn index_of(&mut self, e: &Expr) -> Option<NodeId> {
        self.int(e).map(|(n, _)| n)
    }

    /// A shared array's length, for `let s = SharedArray::<T, N>::new();`.
    pub(crate) fn shared_shape(&mut self, ty: &Ty, name: &str, length: Option<u128>) -> Shape {
        match (ty, length) {
            (Ty::Indexable(Container::Shared, _), Some(n)) => {
                Shape::Buffer { len: Some(self.bounds.constant(n)), parameter: name.to_string() }
            }
            _ => Shape::None,
        }
    }
}

/// The names a block assigns (`x = …`, `x += …`, `&mut x`), each with what it is assigned from and the conditions
/// around the assignment inside the block.
#[derive(Default)]
struct Assigned {
    found: std::collections::BTreeMap<String, Vec<Expr>>,
    conditions: Vec<Expr>,
}

impl Assigned {
    fn target(&mut self, e: &Expr, value: Option<&Expr>) {
        if let Expr::Path(p) = strip(e) {
            if let Some(i) = p.path.get_ident() {
                let sources = self.found.entry(i.to_string()).or_default();
                sources.extend(self.conditions.iter().cloned());
                sources.extend(value.cloned());
            }
        }
    }
}

impl<'ast> Visit<'ast> for Assigned {
    fn visit_expr_assign(&mut self, a: &'ast syn::ExprAssign) {
        self.target(&a.left, Some(&a.right));
        syn::visit::visit_expr_assign(self, a);
    }
    fn visit_expr_binary(&mut self, b: &'ast syn::ExprBinary) {
        if matches!(
            b.op,
            BinOp::AddAssign(_)
                | BinOp::SubAssign(_)
                | BinOp::MulAssign(_)
                | BinOp::DivAssign(_)
                | BinOp::RemAssign(_)
                | BinOp::BitAndAssign(_)
                | BinOp::BitOrAssign(_)
                | BinOp::BitXorAssign(_)
                | BinOp::ShlAssign(_)
                | BinOp::ShrAssign(_)
        ) {
            self.target(&b.left, Some(&b.right));
        }
        syn::visit::visit_expr_binary(self, b);
    }
    fn visit_expr_reference(&mut self, r: &'ast syn::ExprReference) {
        if r.mutability.is_some() {
            self.target(&r.expr, None);
        }
        syn::visit::visit_expr_reference(self, r);
    }
    fn visit_expr_if(&mut self, i: &'ast syn::ExprIf) {
        self.visit_expr(&i.cond);
        self.conditions.push((*i.cond).clone());
        self.visit_block(&i.then_branch);
        if let Some((_, e)) = &i.else_branch {
            self.visit_expr(e);
        }
        self.conditions.pop();
    }
    fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
        self.visit_expr(&w.cond);
        self.conditions.push((*w.cond).clone());
        self.visit_block(&w.body);
        self.conditions.pop();
    }
    fn visit_expr_match(&mut self, m: &'ast syn::ExprMatch) {
        self.visit_expr(&m.expr);
        self.conditions.push((*m.expr).clone());
        for arm in &m.arms {
            self.visit_arm(arm);
        }
        self.conditions.pop();
    }
}

/// Whether a block always leaves before its end (its last statement is `return`, `break` or `continue`).
pub(crate) fn diverges(block: &syn::Block) -> bool {
    matches!(block.stmts.last(), Some(syn::Stmt::Expr(Expr::Return(_) | Expr::Break(_) | Expr::Continue(_), _)))
}

/// Whether `e` may leave the code around it early: a `return`, or a `break`/`continue` that is not inside a loop
/// of `e` itself (`loops`: how many loops of `e` enclose the point), or any labeled one.
pub(crate) fn leaves(e: &Expr, loops: usize) -> bool {
    struct Finder {
        loops: usize,
        found: bool,
    }
    impl<'ast> Visit<'ast> for Finder {
        fn visit_expr_return(&mut self, _: &'ast syn::ExprReturn) {
            self.found = true;
        }
        fn visit_expr_break(&mut self, b: &'ast syn::ExprBreak) {
            self.found |= self.loops == 0 || b.label.is_some();
        }
        fn visit_expr_continue(&mut self, c: &'ast syn::ExprContinue) {
            self.found |= self.loops == 0 || c.label.is_some();
        }
        fn visit_expr_while(&mut self, w: &'ast syn::ExprWhile) {
            self.loops += 1;
            syn::visit::visit_expr_while(self, w);
            self.loops -= 1;
        }
        fn visit_expr_for_loop(&mut self, f: &'ast syn::ExprForLoop) {
            self.loops += 1;
            syn::visit::visit_expr_for_loop(self, f);
            self.loops -= 1;
        }
        fn visit_expr_loop(&mut self, l: &'ast syn::ExprLoop) {
            self.loops += 1;
            syn::visit::visit_expr_loop(self, l);
            self.loops -= 1;
        }
    }
    let mut finder = Finder { loops, found: false };
    finder.visit_expr(e);
    finder.found
}

/// `N` of `SharedArray<T, N>`, when it is a literal.
pub(crate) fn shared_length(ty: &syn::Type) -> Option<u128> {
    let syn::Type::Path(p) = ty else { return None };
    let syn::PathArguments::AngleBracketed(a) = &p.path.segments.last()?.arguments else { return None };
    match a.args.iter().nth(1)? {
        syn::GenericArgument::Const(Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. })) => i.base10_parse().ok(),
        syn::GenericArgument::Type(syn::Type::Verbatim(_)) => None,
        _ => None,
    }
}

/// The accesses of one vocabulary method call, and the `weft::detail` function that checks them on the device.
pub(crate) struct CallSites {
    pub(crate) sites: Vec<SiteId>,
    /// `weft::detail::<checker>(receiver, arguments…, line)`.
    pub(crate) checker: &'static str,
    /// The checker also takes the function's `DevComm` (a window's LSA view is checked against its team size).
    pub(crate) needs_dev: bool,
}

impl Lowerer<'_> {
    /// The sites of `recv.name(args)`, for the receiver types whose methods reach memory.
    pub(crate) fn method_sites(&mut self, m: &syn::ExprMethodCall, recv_ty: &Ty, arg_tys: &[Ty]) -> Option<CallSites> {
        use crate::codegen::types::Vocab;
        let name = m.method.to_string();
        let args: Vec<&Expr> = m.args.iter().collect();
        let mut sites = Vec::new();
        let (checker, needs_dev) = match (recv_ty, name.as_str(), args.len()) {
            (
                Ty::Indexable(container, elem),
                "load_pack" | "store_pack" | "load_wide" | "store_wide" | "lamport_store_pack" | "lamport_clear_pack"
                | "lamport_wait_pack",
                _,
            ) if *container != Container::Shared => {
                let lanes_of = match name.as_str() {
                    "load_pack" | "store_pack" | "lamport_store_pack" | "lamport_clear_pack" | "lamport_wait_pack" => {
                        Self::elem_of_ty(elem)
                    }
                    "load_wide" => m.turbofish.as_ref().and_then(|t| match t.args.first() {
                        Some(syn::GenericArgument::Type(t)) => self.elem_type(t),
                        _ => None,
                    }),
                    _ => match arg_tys.get(1) {
                        Some(Ty::Vocab(Vocab::WidePack, Some(e))) => Self::elem_of_ty(e),
                        _ => None,
                    },
                };
                let lanes = lanes_of.map(|e| self.atom(Atom::Lanes(e)));
                let (len, parameter) = self.buffer_of(&m.receiver);
                let index = self.index_of(args[0]);
                match lanes {
                    Some(lanes) => sites.push(self.site(m, SiteKind::Pack { lanes }, parameter, index, None, len)),
                    None => sites.push(self.site(m, SiteKind::Index, parameter, None, None, None)),
                }
                (
                    match name.as_str() {
                        "load_pack" => "load_pack_at",
                        "store_pack" => "store_pack_at",
                        "lamport_store_pack" => "lamport_store_pack_at",
                        "lamport_clear_pack" => "lamport_clear_pack_at",
                        "lamport_wait_pack" => "lamport_wait_pack_at",
                        "load_wide" => "load_wide_at",
                        _ => "store_wide_at",
                    },
                    false,
                )
            }
            // Tensor-core tiles: the whole tile is checked on the device, never proven at launch.
            (
                Ty::Indexable(_, _),
                "mma_load_a" | "mma_load_b" | "mma_store" | "mma_ldmatrix_a" | "mma_ldmatrix_b" | "gemm_block"
                | "gemm_store",
                _,
            ) => {
                let (_, parameter) = self.buffer_of(&m.receiver);
                sites.push(self.site(m, SiteKind::Index, parameter, None, None, None));
                (
                    match name.as_str() {
                        "mma_load_a" => "mma_load_a_at",
                        "mma_load_b" => "mma_load_b_at",
                        "mma_ldmatrix_a" => "mma_ldmatrix_a_at",
                        "mma_ldmatrix_b" => "mma_ldmatrix_b_at",
                        "gemm_block" => "gemm_block_at",
                        "gemm_store" => "gemm_store_at",
                        _ => "mma_store_at",
                    },
                    false,
                )
            }
            (Ty::Window(_), "lsa", 1) => {
                let (_, parameter) = self.buffer_of(&m.receiver);
                let size = self.atom(Atom::TeamSize(TeamKind::Lsa));
                let peer = self.index_of(args[0]);
                sites.push(self.site(m, SiteKind::Peer, parameter, peer, None, Some(size)));
                ("lsa_at", true)
            }
            (Ty::Window(_), "peer", 2) => {
                let (_, parameter) = self.buffer_of(&m.receiver);
                // The view is the peer's memory in this rank's LSA team: a peer below the LSA team's size is one
                // of its members; one of another team (the world's, the rail's, a factor's) may be outside it, so
                // it is checked on the device, against both teams.
                let size = match self.shape(args[0]) {
                    Shape::Team(TeamKind::Lsa) => Some(self.atom(Atom::TeamSize(TeamKind::Lsa))),
                    _ => None,
                };
                let peer = self.index_of(args[1]);
                sites.push(self.site(m, SiteKind::Peer, parameter, peer, None, size));
                ("peer_at", true)
            }
            (Ty::Vocab(Vocab::Pack | Vocab::WidePack, Some(elem)), "lane", 1) => {
                let lanes = Self::elem_of_ty(elem).map(|e| self.atom(Atom::Lanes(e)));
                let k = self.index_of(args[0]);
                sites.push(self.site(m, SiteKind::Index, "the pack".into(), k, None, lanes));
                ("lane_at", false)
            }
            (Ty::Vocab(Vocab::MultimemView, _), "load_reduce_sum" | "reduce_add" | "store", _) => {
                let (len, parameter) = self.buffer_of(&m.receiver);
                let index = self.index_of(args[0]);
                sites.push(self.site(m, SiteKind::Index, parameter, index, None, len));
                (
                    match name.as_str() {
                        "load_reduce_sum" => "load_reduce_sum_at",
                        "reduce_add" => "reduce_add_at",
                        _ => "store_at",
                    },
                    false,
                )
            }
            (Ty::Vocab(Vocab::GinSession, _), "put" | "get" | "put_value" | "signal", _) => {
                let size = match self.shape(args[0]) {
                    Shape::Team(team) => Some(self.atom(Atom::TeamSize(team))),
                    _ => None,
                };
                let peer = self.index_of(args[1]);
                let (_, team_text) = self.buffer_of(args[0]);
                sites.push(self.site(m, SiteKind::Peer, team_text, peer, None, size));
                match name.as_str() {
                    "put" | "get" => {
                        let count = self.index_of(args[4]);
                        for window in [args[2], args[3]] {
                            let (len, parameter) = self.buffer_of(window);
                            sites.push(self.site(m, SiteKind::Count, parameter, count, None, len));
                        }
                    }
                    "put_value" => {
                        let one = self.bounds.constant(1);
                        let (len, parameter) = self.buffer_of(args[2]);
                        sites.push(self.site(m, SiteKind::Count, parameter, Some(one), None, len));
                    }
                    _ => {}
                }
                (
                    match name.as_str() {
                        "put" => "put_at",
                        "get" => "get_at",
                        "put_value" => "put_value_at",
                        _ => "signal_at",
                    },
                    false,
                )
            }
            (Ty::Vocab(Vocab::GinSession, _), "read_va_signal" | "wait_va_signal" | "reset_va_signal", _) => {
                let window = if name == "wait_va_signal" { args[1] } else { args[0] };
                let one = self.bounds.constant(1);
                let (len, parameter) = self.buffer_of(window);
                sites.push(self.site(m, SiteKind::Count, parameter, Some(one), None, len));
                (
                    match name.as_str() {
                        "read_va_signal" => "read_va_signal_at",
                        "wait_va_signal" => "wait_va_signal_at",
                        _ => "reset_va_signal_at",
                    },
                    false,
                )
            }
            (
                Ty::DevComm,
                "lsa_reduce_sum"
                | "lsa_copy"
                | "lsa_reduce_sum_copy"
                | "multimem_reduce_sum"
                | "multimem_copy"
                | "multimem_reduce_sum_copy",
                4,
            ) => {
                let count = self.index_of(args[3]);
                for buffer in [args[1], args[2]] {
                    let (len, parameter) = self.buffer_of(buffer);
                    sites.push(self.site(m, SiteKind::Count, parameter, count, None, len));
                }
                (
                    match name.as_str() {
                        "lsa_reduce_sum" => "lsa_reduce_sum_at",
                        "lsa_copy" => "lsa_copy_at",
                        "lsa_reduce_sum_copy" => "lsa_reduce_sum_copy_at",
                        "multimem_reduce_sum" => "multimem_reduce_sum_at",
                        "multimem_copy" => "multimem_copy_at",
                        _ => "multimem_reduce_sum_copy_at",
                    },
                    false,
                )
            }
            _ => return None,
        };
        Some(CallSites { sites, checker, needs_dev })
    }

    /// The sites of a call of a vocabulary free function that reaches memory (`local_copy` and friends): never
    /// proven (their strides are not followed), so always checked on the device.
    pub(crate) fn function_sites(&mut self, c: &syn::ExprCall, name: &str) -> Option<CallSites> {
        let checker = match name {
            "local_reduce_sum" => "local_reduce_sum_at",
            "local_copy" => "local_copy_at",
            "local_reduce_sum_copy" => "local_reduce_sum_copy_at",
            _ => return None,
        };
        let site = self.site(c, SiteKind::Count, name.to_string(), None, None, None);
        Some(CallSites { sites: vec![site], checker, needs_dev: false })
    }

    /// The C++ name of the function's `DevComm` parameter, if it has one.
    pub(crate) fn dev_comm_name(&self) -> Option<String> {
        let p = self.sig.params.iter().find(|p| matches!(p.kind, ParamKind::DevComm { .. }))?;
        self.lookup(&p.ident.to_string()).map(|id| self.locals[id].cpp.clone())
    }

    /// A window's LSA view checked on the device needs the team size, which only a `DevComm` parameter carries.
    pub(crate) fn check_peer_sites(&mut self, on_device: &[SiteId]) {
        for (site, span) in std::mem::take(&mut self.lsa_without_dev) {
            if on_device.contains(&site) {
                self.cx.error_at(
                    span,
                    "weft cannot bound this peer index by the LSA team's size, and this function has no `&DevComm` \
                     parameter to check it against on the device: loop over `0..dev.lsa_size()` (or narrow the \
                     index with `if peer < dev.lsa_size()`) with a `dev: &DevComm<Lsa>` parameter",
                );
            }
        }
    }
}
