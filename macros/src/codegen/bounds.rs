//! The bounds of a body's memory accesses (docs/macro.md, "Bounds"): the lowering records every access to a slice,
//! window view, shared array or pack ("site") with its index as a small expression graph over the launch's values,
//! and decides here which accesses are *proven*:
//!
//! - the index is arithmetic over values known at launch (scalar parameters, lengths, team sizes and ranks, the grid,
//!   the pack width) and over thread and loop indices whose ranges those values give;
//! - its largest value is one the kernel really reaches (*exact*): no enclosing condition the analysis cannot follow
//!   hides it, no operation loses track of it (`%`, a join of two branches), and the variables it adds or multiplies
//!   are independent. An inexact bound may be larger than what the kernel reaches, and refusing a launch for it
//!   would be wrong; such an access is left unproven instead.
//!
//! A proven access compiles to a plain access, and the generated `launch` evaluates its bound on the launch's values
//! with `weft_host::launch::bounds` and refuses the launch if the buffer is too short (or proves it here, when the
//! index is below the very length it is compared with). Every other access is *unproven*: it compiles to a
//! `weft::detail::*_at` call that checks it on the device in the form `launch` runs (`WEFT_BOUNDS_CHECKS`) and is a
//! plain access in the form `launch_unchecked` runs.
//!
//! Nodes are hash-consed, so structurally equal expressions share an id, and are created children first, so ids are
//! a topological order.

use std::collections::{BTreeSet, HashMap};

use crate::codegen::types::Scalar;

pub(crate) type NodeId = usize;
pub(crate) type CondId = usize;
pub(crate) type SiteId = usize;

/// A dimension of the launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Axis {
    X,
    Y,
    Z,
}

impl Axis {
    pub(crate) fn index(self) -> usize {
        match self {
            Axis::X => 0,
            Axis::Y => 1,
            Axis::Z => 2,
        }
    }

    #[cfg(test)]
    fn letter(self) -> char {
        ['x', 'y', 'z'][self.index()]
    }
}

/// A team whose size and rank the host knows at launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum TeamKind {
    Lsa,
    World,
    Rail,
}

/// An element type, for its pack width (`16 / size_of::<T>()`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum ElemType {
    Scalar(Scalar),
    Param(String),
}

/// The leaves of the graph.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Atom {
    Const(u128),
    /// An integer parameter's value (a kernel's is known at launch; a device fn's is not).
    Scalar(String),
    /// A slice or window parameter's length.
    Len(String),
    TeamSize(TeamKind),
    TeamRank(TeamKind),
    Lanes(ElemType),
    GridDim(Axis),
    BlockDim(Axis),
    /// `grid_size_1d()`: `grid.x * block.x`.
    GridSize1d,
    /// Thread-varying: the ranges the launch's geometry gives.
    ThreadIdx(Axis),
    BlockIdx(Axis),
    LaneId,
    WarpId,
    Index1d,
    /// A loop-carried or otherwise untracked value: bounded only where a condition refines it.
    Unbounded(u32),
}

/// Arithmetic, with C++'s unsigned semantics (the width is the operation's type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Add,
    Sub,
    /// `a > b ? a - b : 0` (a window's length after `offset(b)`).
    SatSub,
    Mul,
    Div,
    Rem,
    DivCeil,
    Min,
    Max,
    Shl,
    Shr,
    BitAnd,
    BitOr,
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Rel {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
}

impl Rel {
    /// `!(a rel b)` as `a rel' b`, where there is one.
    pub(crate) fn negate(self) -> Option<Rel> {
        match self {
            Rel::Lt => Some(Rel::Ge),
            Rel::Le => Some(Rel::Gt),
            Rel::Gt => Some(Rel::Le),
            Rel::Ge => Some(Rel::Lt),
            Rel::Eq => None,
        }
    }

    /// `b rel' a` for `a rel b`.
    pub(crate) fn flip(self) -> Rel {
        match self {
            Rel::Lt => Rel::Gt,
            Rel::Le => Rel::Ge,
            Rel::Gt => Rel::Lt,
            Rel::Ge => Rel::Le,
            Rel::Eq => Rel::Eq,
        }
    }
}

/// The width of an operation's C++ type: known, or a literal's type variable resolved once the body is lowered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Width {
    Bits(u32),
    Var(usize),
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    Atom(Atom),
    Op(Op, NodeId, NodeId, Width),
    /// `as` an unsigned type.
    Cast(NodeId, Width),
    /// A `for` variable: `start .. end` (or `..=`); `exact` is false for `step_by`.
    Range {
        start: NodeId,
        end: NodeId,
        inclusive: bool,
        var: u32,
        exact: bool,
    },
    /// The values of the first node for which `first rel second` can hold.
    Refine(Rel, NodeId, NodeId),
    /// `if c { a } else { b }` with `c` decided at launch.
    Pick(CondId, NodeId, NodeId),
    /// `if c { a } else { b }` with `c` not decided at launch.
    Join(NodeId, NodeId),
}

/// A condition decided at launch (made of uniform values only).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Cond {
    Const(bool),
    Cmp(Rel, NodeId, NodeId),
    Ne(NodeId, NodeId),
    And(CondId, CondId),
    Or(CondId, CondId),
    Not(CondId),
}

/// What the analysis knows of a node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Info {
    /// The same on every thread and known at launch (no thread or loop index in it).
    pub(crate) uniform: bool,
    /// The thread and loop variables it depends on.
    pub(crate) vars: BTreeSet<u32>,
    /// Its largest value is one the kernel reaches (module docs).
    pub(crate) exact: bool,
    /// It has an upper bound (no unrefined [`Atom::Unbounded`]).
    pub(crate) bounded: bool,
    /// Every leaf is known on the host at launch (a device fn's parameters are not).
    pub(crate) host: bool,
}

/// Thread variables: the fixed ids of the thread and block indices (loop variables get ids above).
fn thread_vars(atom: &Atom) -> BTreeSet<u32> {
    let ids: &[u32] = match atom {
        Atom::ThreadIdx(a) => &[[0, 1, 2][a.index()]],
        Atom::BlockIdx(a) => &[[3, 4, 5][a.index()]],
        Atom::LaneId | Atom::WarpId => &[0, 1, 2],
        Atom::Index1d => &[0, 3],
        _ => &[],
    };
    ids.iter().copied().collect()
}

/// The first id of a loop or loop-carried variable.
pub(crate) const FIRST_LOOP_VAR: u32 = 6;

/// What kind of access a site is, and so which check it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SiteKind {
    /// `x[i]`: `i < len`.
    Index,
    /// `x.load_pack(p)` and friends: `(p + 1) * lanes <= len`.
    Pack { lanes: NodeId },
    /// `&x[a..b]`: `a <= b <= len` (`index` is `a`, `end` is `b`).
    Range,
    /// A count of elements read or written: `count <= len`.
    Count,
    /// `w.lsa(peer)`, `w.peer(team, peer)`: `peer < team size` (`len` is the size).
    Peer,
}

/// One access.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    pub(crate) kind: SiteKind,
    /// The buffer accessed (for views and sub-slices: the parameter they come from).
    pub(crate) parameter: String,
    /// The access as written.
    pub(crate) access: String,
    pub(crate) line: u32,
    /// The access's tokens, for errors spanned on it.
    pub(crate) tokens: proc_macro2::TokenStream,
    pub(crate) index: Option<NodeId>,
    pub(crate) end: Option<NodeId>,
    pub(crate) len: Option<NodeId>,
    /// Conditions decided at launch under which the access runs.
    pub(crate) guards: Vec<CondId>,
    /// Whether the enclosing conditions keep the index's bound exact.
    pub(crate) context_exact: bool,
}

/// How a site was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// In bounds by construction (the index is below the very length it is compared with): no check at all.
    Discharged,
    /// Checked by `launch` before launching.
    AtLaunch,
    /// Checked on the device in the form `launch` runs.
    OnDevice,
}

/// The graph, the sites, and (after [`Bounds::finish`]) the decisions.
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    nodes: Vec<Node>,
    infos: Vec<Info>,
    ids: HashMap<Node, NodeId>,
    conds: Vec<Cond>,
    cond_ids: HashMap<Cond, CondId>,
    pub(crate) sites: Vec<Site>,
    pub(crate) decisions: Vec<Decision>,
    /// Resolved widths of type variables (bits, or `None` for a signed or non-integer type).
    widths: HashMap<usize, Option<u32>>,
    next_var: u32,
    /// When each node and condition was created, on one clock: a node's operands, conditions included, were
    /// created before it (the order the launcher evaluates them in).
    node_created: Vec<usize>,
    cond_created: Vec<usize>,
}

impl Bounds {
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    pub(crate) fn info(&self, id: NodeId) -> &Info {
        &self.infos[id]
    }

    pub(crate) fn cond(&self, id: CondId) -> &Cond {
        &self.conds[id]
    }

    /// A fresh loop (or loop-carried) variable.
    pub(crate) fn fresh_var(&mut self) -> u32 {
        let v = FIRST_LOOP_VAR + self.next_var;
        self.next_var += 1;
        v
    }

    fn intern(&mut self, node: Node, info: Info) -> NodeId {
        if let Some(&id) = self.ids.get(&node) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(node.clone());
        self.infos.push(info);
        self.ids.insert(node, id);
        self.node_created.push(self.node_created.len() + self.cond_created.len());
        id
    }

    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn cond_count(&self) -> usize {
        self.conds.len()
    }

    pub(crate) fn node_created(&self, id: NodeId) -> usize {
        self.node_created[id]
    }

    pub(crate) fn cond_created(&self, id: CondId) -> usize {
        self.cond_created[id]
    }

    pub(crate) fn atom(&mut self, atom: Atom, host: bool) -> NodeId {
        let vars = thread_vars(&atom);
        let info = match &atom {
            Atom::Unbounded(v) => Info { uniform: false, vars: [*v].into(), exact: true, bounded: false, host },
            _ => Info { uniform: vars.is_empty(), vars, exact: true, bounded: true, host },
        };
        self.intern(Node::Atom(atom), info)
    }

    /// A fresh untracked value that depends on `deps` (the variables of the values and conditions it was assigned
    /// from and under: a local set inside `if t < end` moves with `t`).
    pub(crate) fn unbounded(&mut self, deps: &BTreeSet<u32>, host: bool) -> NodeId {
        let var = self.fresh_var();
        let id = self.atom(Atom::Unbounded(var), host);
        self.infos[id].vars.extend(deps.iter().copied());
        id
    }

    /// The variables that stand for a value itself: an untracked value's own variable (not those it depends on),
    /// else all of its variables.
    pub(crate) fn own_vars(&self, id: NodeId) -> BTreeSet<u32> {
        match &self.nodes[id] {
            Node::Atom(Atom::Unbounded(v)) => [*v].into(),
            Node::Refine(_, a, _) | Node::Cast(a, _) => self.own_vars(*a),
            _ => self.infos[id].vars.clone(),
        }
    }

    pub(crate) fn constant(&mut self, value: u128) -> NodeId {
        self.atom(Atom::Const(value), true)
    }

    pub(crate) fn op(&mut self, op: Op, a: NodeId, b: NodeId, width: Width) -> NodeId {
        let (x, y) = (&self.infos[a], &self.infos[b]);
        let independent = x.vars.is_disjoint(&y.vars);
        let exact = x.exact
            && y.exact
            && match op {
                // Both largest values are reached together only by independent variables.
                Op::Add | Op::Mul => independent,
                // Largest minus smallest: exact when the subtrahend does not vary.
                Op::Sub | Op::SatSub | Op::Div | Op::DivCeil | Op::Shl | Op::Shr => y.uniform,
                Op::Min | Op::Max => independent,
                Op::Rem | Op::BitAnd | Op::BitOr => x.uniform && y.uniform,
            };
        let info = Info {
            uniform: x.uniform && y.uniform,
            vars: x.vars.union(&y.vars).copied().collect(),
            exact,
            bounded: x.bounded && y.bounded,
            host: x.host && y.host,
        };
        self.intern(Node::Op(op, a, b, width), info)
    }

    pub(crate) fn cast(&mut self, a: NodeId, width: Width) -> NodeId {
        let info = self.infos[a].clone();
        self.intern(Node::Cast(a, width), info)
    }

    pub(crate) fn range(&mut self, start: NodeId, end: NodeId, inclusive: bool, exact: bool) -> NodeId {
        let var = self.fresh_var();
        let (s, e) = (&self.infos[start], &self.infos[end]);
        let info = Info {
            uniform: false,
            vars: [var].into(),
            // The bound is reached when the range's ends do not vary (a loop over `0..n` reaches `n - 1`).
            exact: exact && s.exact && e.exact && s.uniform && e.uniform,
            bounded: s.bounded && e.bounded,
            host: s.host && e.host,
        };
        self.intern(Node::Range { start, end, inclusive, var, exact }, info)
    }

    /// `a` where `a rel b` holds.
    pub(crate) fn refine(&mut self, rel: Rel, a: NodeId, b: NodeId) -> NodeId {
        let (x, y) = (&self.infos[a], &self.infos[b]);
        let limits = matches!(rel, Rel::Lt | Rel::Le | Rel::Eq);
        let info = Info {
            uniform: x.uniform && y.uniform,
            vars: x.vars.clone(),
            exact: x.exact && y.exact,
            // An upper limit bounds an unbounded value.
            bounded: x.bounded || (limits && y.bounded),
            host: x.host && y.host,
        };
        self.intern(Node::Refine(rel, a, b), info)
    }

    pub(crate) fn pick(&mut self, c: CondId, a: NodeId, b: NodeId) -> NodeId {
        // Exact only when the launch decides the condition: one value for every thread, computed on the host. An
        // undecided one joins both sides, which may be more than the kernel reaches.
        let decided = self.cond_decided(c);
        let (x, y) = (&self.infos[a], &self.infos[b]);
        let info = Info {
            uniform: x.uniform && y.uniform,
            vars: x.vars.union(&y.vars).copied().collect(),
            exact: x.exact && y.exact && decided,
            bounded: x.bounded && y.bounded,
            host: x.host && y.host,
        };
        self.intern(Node::Pick(c, a, b), info)
    }

    pub(crate) fn join(&mut self, a: NodeId, b: NodeId) -> NodeId {
        let (x, y) = (&self.infos[a], &self.infos[b]);
        let info = Info {
            uniform: false,
            vars: x.vars.union(&y.vars).copied().collect(),
            exact: false,
            bounded: x.bounded && y.bounded,
            host: x.host && y.host,
        };
        self.intern(Node::Join(a, b), info)
    }

    pub(crate) fn condition(&mut self, cond: Cond) -> CondId {
        if let Some(&id) = self.cond_ids.get(&cond) {
            return id;
        }
        let id = self.conds.len();
        self.conds.push(cond.clone());
        self.cond_ids.insert(cond, id);
        self.cond_created.push(self.node_created.len() + self.cond_created.len());
        id
    }

    /// Whether the launch decides `c`: every node under it is known on the host and the same for every thread.
    pub(crate) fn cond_decided(&self, c: CondId) -> bool {
        match &self.conds[c] {
            Cond::Const(_) => true,
            Cond::Cmp(_, a, b) | Cond::Ne(a, b) => {
                [*a, *b].iter().all(|&n| self.infos[n].host && self.infos[n].uniform && self.known_exactly(n))
            }
            Cond::And(a, b) | Cond::Or(a, b) => self.cond_decided(*a) && self.cond_decided(*b),
            Cond::Not(a) => self.cond_decided(*a),
        }
    }

    /// Whether the host computes `n` as one value when its atoms are known (`weft_host::launch::bounds` keeps known
    /// operands known through every operation but `|`/`^`, which it bounds).
    fn known_exactly(&self, n: NodeId) -> bool {
        match &self.nodes[n] {
            Node::Atom(_) => true,
            Node::Op(Op::BitOr, ..) => false,
            Node::Op(_, a, b, _) => self.known_exactly(*a) && self.known_exactly(*b),
            Node::Cast(a, _) => self.known_exactly(*a),
            Node::Refine(..) | Node::Range { .. } | Node::Pick(..) | Node::Join(..) => false,
        }
    }

    /// Whether every node under `c` is known on the host.
    pub(crate) fn cond_on_host(&self, c: CondId) -> bool {
        match &self.conds[c] {
            Cond::Const(_) => true,
            Cond::Cmp(_, a, b) | Cond::Ne(a, b) => self.infos[*a].host && self.infos[*b].host,
            Cond::And(a, b) | Cond::Or(a, b) => self.cond_on_host(*a) && self.cond_on_host(*b),
            Cond::Not(a) => self.cond_on_host(*a),
        }
    }

    pub(crate) fn add_site(&mut self, site: Site) -> SiteId {
        self.sites.push(site);
        self.sites.len() - 1
    }

    /// Decides every site, once the types of literals are known (`width_of` gives a type variable's width in bits,
    /// or `None` for a signed or non-integer type, whose values this analysis does not follow).
    pub(crate) fn finish(&mut self, width_of: impl Fn(usize) -> Option<u32>) {
        let mut vars = BTreeSet::new();
        for node in &self.nodes {
            if let Node::Op(.., Width::Var(v)) | Node::Cast(_, Width::Var(v)) = node {
                vars.insert(*v);
            }
        }
        self.widths = vars.into_iter().map(|v| (v, width_of(v))).collect();
        self.decisions = (0..self.sites.len()).map(|i| self.decide(i)).collect();
    }

    /// The width of an operation, in bits; `None` when the type is signed or not an integer.
    pub(crate) fn bits(&self, width: Width) -> Option<u32> {
        match width {
            Width::Bits(b) => Some(b),
            Width::Var(v) => self.widths.get(&v).copied().flatten(),
        }
    }

    /// Whether every operation under `id` has an unsigned integer type.
    fn typed(&self, id: NodeId) -> bool {
        match &self.nodes[id] {
            Node::Atom(_) => true,
            Node::Op(_, a, b, w) => self.bits(*w).is_some() && self.typed(*a) && self.typed(*b),
            Node::Cast(a, w) => self.bits(*w).is_some() && self.typed(*a),
            Node::Range { start, end, .. } => self.typed(*start) && self.typed(*end),
            Node::Refine(_, a, b) | Node::Join(a, b) | Node::Pick(_, a, b) => self.typed(*a) && self.typed(*b),
        }
    }

    fn decide(&self, i: SiteId) -> Decision {
        let site = &self.sites[i];
        let nodes: Vec<NodeId> = [site.index, site.end, site.len].into_iter().flatten().collect();
        let complete =
            site.index.is_some() && site.len.is_some() && (site.kind != SiteKind::Range || site.end.is_some());
        if !complete || !site.context_exact {
            return Decision::OnDevice;
        }
        let lanes = match site.kind {
            SiteKind::Pack { lanes } => Some(lanes),
            _ => None,
        };
        let all: Vec<NodeId> = nodes.iter().copied().chain(lanes).collect();
        if !all.iter().all(|&n| self.typed(n) && self.infos[n].bounded) {
            return Decision::OnDevice;
        }
        // Only the index's largest value must be reached; the length is compared at its smallest.
        let index_exact = [site.index, site.end].into_iter().flatten().all(|n| self.infos[n].exact);
        if !index_exact {
            return Decision::OnDevice;
        }
        if self.discharged(site) {
            return Decision::Discharged;
        }
        let on_host = all.iter().all(|&n| self.infos[n].host) && site.guards.iter().all(|&c| self.cond_on_host(c));
        if on_host {
            Decision::AtLaunch
        } else {
            Decision::OnDevice
        }
    }

    /// Whether the site is in bounds by construction: its index is refined below, or iterates up to, the very
    /// length (or length in packs) it is compared with.
    fn discharged(&self, site: &Site) -> bool {
        let (Some(index), Some(len)) = (site.index, site.len) else { return false };
        let limit = match site.kind {
            SiteKind::Index | SiteKind::Peer => len,
            SiteKind::Pack { lanes } => match self.ids.get(&Node::Op(Op::Div, len, lanes, Width::Bits(64))) {
                Some(&id) => id,
                None => return false,
            },
            SiteKind::Range | SiteKind::Count => return false,
        };
        self.below(index, limit)
    }

    /// Whether every value of `index` is below `limit` by construction.
    fn below(&self, index: NodeId, limit: NodeId) -> bool {
        match &self.nodes[index] {
            Node::Range { end, inclusive: false, .. } => *end == limit,
            Node::Refine(Rel::Lt, a, b) => *b == limit || self.below(*a, limit),
            Node::Refine(_, a, _) => self.below(*a, limit),
            Node::Op(Op::Min, a, b, _) => self.below(*a, limit) || self.below(*b, limit),
            Node::Cast(a, _) => self.below(*a, limit),
            _ => false,
        }
    }

    /// Why a site is checked on the device, for the error of `#[kernel(no_device_checks)]`.
    pub(crate) fn why_unproven(&self, site: &Site) -> &'static str {
        let nodes = [site.index, site.len];
        if nodes.iter().any(Option::is_none) || (site.kind == SiteKind::Range && site.end.is_none()) {
            return "weft cannot follow its index or its buffer's length (a value read from memory, returned by a \
                    device fn, signed, or of a local assigned where weft cannot see)";
        }
        if !site.context_exact {
            return "a condition around it hides which indices it reaches (one weft cannot follow, or on a value that \
                    moves with the index)";
        }
        "its index's largest value is not one weft can compute exactly (a `%`, `step_by`, a join of two branches, or \
         two variables that move together such as `warp * 64 + lane`)"
    }

    /// The sites checked on the device, for the launcher's docs.
    pub(crate) fn unproven(&self) -> impl Iterator<Item = &Site> {
        self.sites.iter().zip(&self.decisions).filter(|(_, d)| **d == Decision::OnDevice).map(|(s, _)| s)
    }

    /// The sites `launch` checks before launching.
    pub(crate) fn at_launch(&self) -> impl Iterator<Item = &Site> {
        self.sites.iter().zip(&self.decisions).filter(|(_, d)| **d == Decision::AtLaunch).map(|(s, _)| s)
    }

    /// The decision for a site (`OnDevice` before [`Bounds::finish`]).
    pub(crate) fn decision(&self, site: SiteId) -> Decision {
        self.decisions.get(site).copied().unwrap_or(Decision::OnDevice)
    }

    /// A short description of a node, for tests.
    #[cfg(test)]
    pub(crate) fn describe(&self, id: NodeId) -> String {
        match &self.nodes[id] {
            Node::Atom(a) => match a {
                Atom::Const(c) => c.to_string(),
                Atom::Scalar(s) => s.clone(),
                Atom::Len(s) => format!("{s}.len()"),
                Atom::TeamSize(t) => format!("{}_size", team_name(*t)),
                Atom::TeamRank(t) => format!("{}_rank", team_name(*t)),
                Atom::Lanes(ElemType::Scalar(s)) => format!("lanes({})", s.rust()),
                Atom::Lanes(ElemType::Param(p)) => format!("lanes({p})"),
                Atom::GridDim(a) => format!("grid.{}", a.letter()),
                Atom::BlockDim(a) => format!("block.{}", a.letter()),
                Atom::GridSize1d => "grid_size_1d".into(),
                Atom::ThreadIdx(a) => format!("thread.{}", a.letter()),
                Atom::BlockIdx(a) => format!("block_idx.{}", a.letter()),
                Atom::LaneId => "lane".into(),
                Atom::WarpId => "warp".into(),
                Atom::Index1d => "index_1d".into(),
                Atom::Unbounded(v) => format!("?{v}"),
            },
            Node::Op(op, a, b, _) => {
                let sym = match op {
                    Op::Add => "+",
                    Op::Sub => "-",
                    Op::SatSub => "-|",
                    Op::Mul => "*",
                    Op::Div => "/",
                    Op::Rem => "%",
                    Op::DivCeil => "/^",
                    Op::Min => "min",
                    Op::Max => "max",
                    Op::Shl => "<<",
                    Op::Shr => ">>",
                    Op::BitAnd => "&",
                    Op::BitOr => "|",
                };
                format!("({} {sym} {})", self.describe(*a), self.describe(*b))
            }
            Node::Cast(a, _) => self.describe(*a),
            Node::Range { start, end, inclusive, .. } => {
                format!("[{}..{}{}]", self.describe(*start), if *inclusive { "=" } else { "" }, self.describe(*end))
            }
            Node::Refine(rel, a, b) => format!("({} where {rel:?} {})", self.describe(*a), self.describe(*b)),
            Node::Pick(c, a, b) => format!("(if c{c} {} else {})", self.describe(*a), self.describe(*b)),
            Node::Join(a, b) => format!("({} | {})", self.describe(*a), self.describe(*b)),
        }
    }
}

pub(crate) fn team_name(t: TeamKind) -> &'static str {
    match t {
        TeamKind::Lsa => "lsa",
        TeamKind::World => "world",
        TeamKind::Rail => "rail",
    }
}

/// The width in bits of an unsigned integer type; `None` for any other.
pub(crate) fn unsigned_bits(s: Scalar) -> Option<u32> {
    match s {
        Scalar::U8 => Some(8),
        Scalar::U16 => Some(16),
        Scalar::U32 => Some(32),
        Scalar::U64 | Scalar::Usize => Some(64),
        _ => None,
    }
}
