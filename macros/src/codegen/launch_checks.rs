//! The checks a generated `launch` makes before launching: the `len(…)` rules the kernel declares, and the bounds of
//! the accesses the analysis proved (`codegen::bounds`), evaluated on the launch's values with
//! `weft_host::launch::bounds`. Paths into the host are `launcher::host`'s.

use proc_macro2::{Literal, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use super::ast::{ParamKind, Signature};
use super::attr::{LenCheck, LenExpr, LenOp};
use super::bounds::{Atom, Axis, Bounds, Cond, CondId, ElemType, Node, NodeId, Op, Rel, SiteKind, TeamKind};
use super::launcher::host;
use super::types::Scalar;

/// The kernel's `DevComm` parameter, if any.
fn dev_comm(sig: &Signature) -> Option<&Ident> {
    sig.params.iter().find(|p| matches!(p.kind, ParamKind::DevComm { .. })).map(|p| &p.ident)
}

/// The first window parameter, if any (a kernel without a `DevComm` reads the LSA team from its window).
fn first_window(sig: &Signature) -> Option<&Ident> {
    sig.params.iter().find(|p| matches!(p.kind, ParamKind::Window { .. })).map(|p| &p.ident)
}

fn team_var(team: TeamKind) -> Ident {
    format_ident!("__weft_team_{}", super::bounds::team_name(team))
}

/// `let __weft_team_lsa = …?;` for the teams `teams` names.
fn team_lookups(sig: &Signature, teams: &[TeamKind]) -> TokenStream {
    let bounds = host::bounds();
    let lookups = teams.iter().map(|team| {
        let var = team_var(*team);
        let value = match (dev_comm(sig), team, first_window(sig)) {
            (Some(dev), TeamKind::Lsa, _) => quote!(#bounds::lsa_team(#dev)?),
            (Some(dev), TeamKind::World, _) => quote!(#bounds::world_team(#dev)?),
            (Some(dev), TeamKind::Rail, _) => quote!(#bounds::rail_team(#dev)?),
            (None, TeamKind::Lsa, Some(w)) => quote!(#bounds::window_lsa_team(#w)?),
            // Unreachable: the analysis leaves such accesses unproven, and `len(…)` rules naming them are refused.
            // Any value at all, should it ever be read.
            _ => quote!((#bounds::Interval::top(32), #bounds::Interval::top(32))),
        };
        quote!(let #var: (#bounds::Interval, #bounds::Interval) = #value;)
    });
    quote!(#(#lookups)*)
}

/// The Rust type of an element type, for `size_of` on the host.
fn elem_tokens(e: &ElemType) -> TokenStream {
    match e {
        ElemType::Param(p) => {
            let ident = Ident::new(p, proc_macro2::Span::call_site());
            quote!(#ident)
        }
        ElemType::Scalar(s @ (Scalar::F16 | Scalar::Bf16)) => {
            let ident = Ident::new(s.rust(), proc_macro2::Span::call_site());
            quote!(::weft::device::#ident)
        }
        ElemType::Scalar(s) => {
            let ident = Ident::new(s.rust(), proc_macro2::Span::call_site());
            quote!(#ident)
        }
    }
}

fn node_var(id: NodeId) -> Ident {
    format_ident!("__weft_b{}", id)
}

fn cond_var(id: CondId) -> Ident {
    format_ident!("__weft_c{}", id)
}

/// The nodes and conditions the checks read, children first.
#[derive(Default)]
struct Needed {
    nodes: Vec<bool>,
    conds: Vec<bool>,
    teams: Vec<TeamKind>,
}

impl Needed {
    fn node(&mut self, b: &Bounds, id: NodeId) {
        if self.nodes[id] {
            return;
        }
        self.nodes[id] = true;
        match b.node(id) {
            Node::Atom(Atom::TeamSize(t) | Atom::TeamRank(t)) => {
                if !self.teams.contains(t) {
                    self.teams.push(*t);
                }
            }
            Node::Atom(_) => {}
            Node::Op(_, a, c, _) | Node::Refine(_, a, c) | Node::Join(a, c) => {
                self.node(b, *a);
                self.node(b, *c);
            }
            Node::Cast(a, _) => self.node(b, *a),
            Node::Range { start, end, .. } => {
                self.node(b, *start);
                self.node(b, *end);
            }
            Node::Pick(c, x, y) => {
                self.cond(b, *c);
                self.node(b, *x);
                self.node(b, *y);
            }
        }
    }

    fn cond(&mut self, b: &Bounds, id: CondId) {
        if self.conds[id] {
            return;
        }
        self.conds[id] = true;
        match b.cond(id) {
            Cond::Const(_) => {}
            Cond::Cmp(_, x, y) | Cond::Ne(x, y) => {
                self.node(b, *x);
                self.node(b, *y);
            }
            Cond::And(x, y) | Cond::Or(x, y) => {
                self.cond(b, *x);
                self.cond(b, *y);
            }
            Cond::Not(x) => self.cond(b, *x),
        }
    }
}

fn u128_lit(value: u128) -> Literal {
    Literal::u128_suffixed(value)
}

fn axis(a: Axis) -> syn::Index {
    syn::Index::from(a.index())
}

/// The value of one node, as an `Interval` expression over earlier nodes.
fn node_value(b: &Bounds, id: NodeId, cfg: &Ident) -> TokenStream {
    let bounds = host::bounds();
    let iv = quote!(#bounds::Interval);
    let bits = |w| b.bits(w).unwrap_or(64);
    let block_size = quote!((#cfg.block_dim.0 as u128 * #cfg.block_dim.1 as u128 * #cfg.block_dim.2 as u128));
    match b.node(id) {
        Node::Atom(atom) => match atom {
            Atom::Const(c) => {
                let c = u128_lit(*c);
                quote!(#iv::point(#c))
            }
            Atom::Scalar(name) => {
                let ident = Ident::new(name, proc_macro2::Span::call_site());
                quote!(#iv::point(#ident as u128))
            }
            Atom::Len(name) => {
                let len = format_ident!("__weft_len_{}", name);
                quote!(#iv::point(#len as u128))
            }
            Atom::TeamSize(t) => {
                let var = team_var(*t);
                quote!(#var.0)
            }
            Atom::TeamRank(t) => {
                let var = team_var(*t);
                quote!(#var.1)
            }
            Atom::Lanes(e) => {
                let ty = elem_tokens(e);
                quote!(#iv::point((16 / ::core::mem::size_of::<#ty>()) as u128))
            }
            Atom::GridDim(a) => {
                let i = axis(*a);
                quote!(#iv::point(#cfg.grid_dim.#i as u128))
            }
            Atom::BlockDim(a) => {
                let i = axis(*a);
                quote!(#iv::point(#cfg.block_dim.#i as u128))
            }
            Atom::GridSize1d => quote!(#iv::point(#cfg.grid_dim.0 as u128 * #cfg.block_dim.0 as u128)),
            Atom::ThreadIdx(a) => {
                let i = axis(*a);
                quote!(#iv::below_count(#cfg.block_dim.#i as u128))
            }
            Atom::BlockIdx(a) => {
                let i = axis(*a);
                quote!(#iv::below_count(#cfg.grid_dim.#i as u128))
            }
            Atom::LaneId => quote!(#iv::below_count(::core::cmp::min(32u128, #block_size))),
            Atom::WarpId => quote!(#iv::below_count(#block_size.div_ceil(32))),
            Atom::Index1d => quote!(#iv::below_count(#cfg.grid_dim.0 as u128 * #cfg.block_dim.0 as u128)),
            Atom::Unbounded(_) => quote!(#iv::top(64)),
        },
        Node::Op(op, x, y, w) => {
            let (x, y, bits) = (node_var(*x), node_var(*y), bits(*w));
            match op {
                Op::Add => quote!(#x.add(#y, #bits)),
                Op::Sub => quote!(#x.sub(#y, #bits)),
                Op::SatSub => quote!(#x.saturating_sub(#y)),
                Op::Mul => quote!(#x.mul(#y, #bits)),
                Op::Div => quote!(#x.div(#y, #bits)),
                Op::Rem => quote!(#x.rem(#y, #bits)),
                Op::DivCeil => quote!(#x.div_ceil(#y, #bits)),
                Op::Min => quote!(#x.min(#y)),
                Op::Max => quote!(#x.max(#y)),
                Op::Shl => quote!(#x.shl(#y, #bits)),
                Op::Shr => quote!(#x.shr(#y, #bits)),
                Op::BitAnd => quote!(#x.bit_and(#y)),
                Op::BitOr => quote!(#x.bit_or(#y)),
            }
        }
        Node::Cast(x, w) => {
            let (x, bits) = (node_var(*x), bits(*w));
            quote!(#x.cast(#bits))
        }
        Node::Range { start, end, inclusive, .. } => {
            let (s, e) = (node_var(*start), node_var(*end));
            quote!(#iv::range(#s, #e, #inclusive))
        }
        Node::Refine(rel, x, y) => {
            let (x, y) = (node_var(*x), node_var(*y));
            match rel {
                Rel::Lt => quote!(#x.below(#y)),
                Rel::Le => quote!(#x.at_most(#y)),
                Rel::Gt => quote!(#x.above(#y)),
                Rel::Ge => quote!(#x.at_least(#y)),
                Rel::Eq => quote!(#x.equal(#y)),
            }
        }
        Node::Pick(c, x, y) => {
            let (c, x, y) = (cond_var(*c), node_var(*x), node_var(*y));
            quote!(#iv::pick(#c, #x, #y))
        }
        Node::Join(x, y) => {
            let (x, y) = (node_var(*x), node_var(*y));
            quote!(#x.join(#y))
        }
    }
}

fn cond_value(b: &Bounds, id: CondId) -> TokenStream {
    let bounds = host::bounds();
    match b.cond(id) {
        Cond::Const(v) => quote!(::core::option::Option::Some(#v)),
        Cond::Cmp(rel, x, y) => {
            let (x, y) = (node_var(*x), node_var(*y));
            match rel {
                Rel::Lt => quote!(#x.lt(#y)),
                Rel::Le => quote!(#x.le(#y)),
                Rel::Gt => quote!(#y.lt(#x)),
                Rel::Ge => quote!(#y.le(#x)),
                Rel::Eq => quote!(#x.eq(#y)),
            }
        }
        Cond::Ne(x, y) => {
            let (x, y) = (node_var(*x), node_var(*y));
            quote!(#bounds::not(#x.eq(#y)))
        }
        Cond::And(x, y) => {
            let (x, y) = (cond_var(*x), cond_var(*y));
            quote!(#bounds::and(#x, #y))
        }
        Cond::Or(x, y) => {
            let (x, y) = (cond_var(*x), cond_var(*y));
            quote!(#bounds::or(#x, #y))
        }
        Cond::Not(x) => {
            let x = cond_var(*x);
            quote!(#bounds::not(#x))
        }
    }
}

/// The checks of the accesses proven at launch, or nothing if there are none.
pub(crate) fn bounds_checks(sig: &Signature, b: &Bounds, cfg: &Ident) -> TokenStream {
    let sites: Vec<_> = b.at_launch().collect();
    if sites.is_empty() {
        return TokenStream::new();
    }
    let mut needed =
        Needed { nodes: vec![false; b.node_count()], conds: vec![false; b.cond_count()], teams: Vec::new() };
    for site in &sites {
        for id in [site.index, site.end, site.len].into_iter().flatten() {
            needed.node(b, id);
        }
        if let SiteKind::Pack { lanes } = site.kind {
            needed.node(b, lanes);
        }
        for c in &site.guards {
            needed.cond(b, *c);
        }
    }
    let bounds = host::bounds();
    let iv = quote!(#bounds::Interval);
    let teams = team_lookups(sig, &needed.teams);
    // Nodes and conditions in creation order: every one's operands come before it.
    let mut lets = Vec::new();
    let (mut n, mut c) = (0, 0);
    while n < b.node_count() || c < b.cond_count() {
        // A condition refers only to nodes created before it, and a node only to conditions created before it:
        // emit whichever of the two was interned first (node ids and condition ids each grow with time).
        let next_node_first = c >= b.cond_count() || (n < b.node_count() && b.node_created(n) < b.cond_created(c));
        if next_node_first {
            if needed.nodes[n] {
                let (var, value) = (node_var(n), node_value(b, n, cfg));
                lets.push(quote!(let #var: #iv = #value;));
            }
            n += 1;
        } else {
            if needed.conds[c] {
                let (var, value) = (cond_var(c), cond_value(b, c));
                lets.push(quote!(let #var: ::core::option::Option<bool> = #value;));
            }
            c += 1;
        }
    }
    let checks = sites.iter().map(|site| {
        let (parameter, access) = (&site.parameter, &site.access);
        let line = site.line;
        let site_ref = quote!(&#bounds::Site { parameter: #parameter, access: #access, line: #line });
        let var = |n: Option<NodeId>| n.map(node_var);
        let (index, end, len) = (var(site.index), var(site.end), var(site.len));
        let check = match &site.kind {
            SiteKind::Index => quote!(#bounds::require_index(NAME, #site_ref, #index, #len)?;),
            SiteKind::Pack { lanes } => {
                let lanes = node_var(*lanes);
                quote!(#bounds::require_pack(NAME, #site_ref, #index, #lanes, #len)?;)
            }
            SiteKind::Range => quote!(#bounds::require_range(NAME, #site_ref, #index, #end, #len)?;),
            SiteKind::Count => quote!(#bounds::require_count(NAME, #site_ref, #index, #len)?;),
            SiteKind::Peer => quote!(#bounds::require_peer(NAME, #site_ref, #index, #len)?;),
        };
        if site.guards.is_empty() {
            check
        } else {
            // Only where the conditions decided at launch around the access let it run.
            let guards = site.guards.iter().map(|c| cond_var(*c));
            quote! {
                if true #(&& #bounds::reachable(#guards))* {
                    #check
                }
            }
        }
    });
    quote! {
        #teams
        #(#lets)*
        #(#checks)*
    }
}

/// The declared `len(…)` rules, checked by both `launch` and `launch_unchecked`.
pub(crate) fn declared_checks(sig: &Signature, checks: &[LenCheck]) -> TokenStream {
    if checks.is_empty() {
        return TokenStream::new();
    }
    let bounds = host::bounds();
    let length_check_failed = host::length_check_failed();
    let mut teams: Vec<TeamKind> = Vec::new();
    for check in checks {
        for ident in check.lhs.names().into_iter().chain(check.rhs.names()) {
            if sig.params.iter().all(|p| p.ident != *ident) {
                let team = if ident.to_string().starts_with("lsa_") { TeamKind::Lsa } else { TeamKind::World };
                if !teams.contains(&team) {
                    teams.push(team);
                }
            }
        }
    }
    let lookups = team_lookups(sig, &teams);
    let name_value = |ident: &Ident| -> TokenStream {
        match sig.params.iter().find(|p| p.ident == *ident).map(|p| &p.kind) {
            Some(ParamKind::Window { .. } | ParamKind::Slice { .. }) => {
                let len = format_ident!("__weft_len_{}", ident);
                quote!(::core::option::Option::Some(#len as u128))
            }
            Some(_) => quote!(::core::option::Option::Some(#ident as u128)),
            None => {
                let name = ident.to_string();
                let team = team_var(if name.starts_with("lsa_") { TeamKind::Lsa } else { TeamKind::World });
                let field = if name.ends_with("rank") { quote!(1) } else { quote!(0) };
                quote!(#team.#field.bounds().map(|(value, _)| value))
            }
        }
    };
    fn value(e: &LenExpr, name_value: &dyn Fn(&Ident) -> TokenStream, bounds: &TokenStream) -> TokenStream {
        match e {
            LenExpr::Name(i) => name_value(i),
            LenExpr::Literal(v) => {
                let v = u128_lit(u128::from(*v));
                quote!(::core::option::Option::Some(#v))
            }
            LenExpr::Binary(a, op, b) => {
                let (a, b) = (value(a, name_value, bounds), value(b, name_value, bounds));
                let op = match op {
                    LenOp::Add => quote!(checked_add),
                    LenOp::Sub => quote!(checked_sub),
                    LenOp::Mul => quote!(checked_mul),
                    LenOp::Div => quote!(checked_div),
                    LenOp::Rem => quote!(checked_rem),
                };
                quote!(#bounds::rule(#a, #b, u128::#op))
            }
        }
    }
    let rules = checks.iter().map(|check| {
        let (lhs, rhs, op) = (value(&check.lhs, &name_value, &bounds), value(&check.rhs, &name_value, &bounds), &check.op);
        let rule = check.tokens.to_string();
        let mut seen: Vec<String> = Vec::new();
        let values: Vec<TokenStream> = check
            .lhs
            .names()
            .into_iter()
            .chain(check.rhs.names())
            .filter(|i| {
                let s = i.to_string();
                let fresh = !seen.contains(&s);
                seen.push(s);
                fresh
            })
            .map(|i| {
                let (n, v) = (i.to_string(), name_value(i));
                quote!((#n, #v.unwrap_or(0) as u64))
            })
            .collect();
        quote! {
            match (#lhs, #rhs) {
                (::core::option::Option::Some(__weft_l), ::core::option::Option::Some(__weft_r)) if __weft_l #op __weft_r => {}
                _ => return ::core::result::Result::Err(#length_check_failed(NAME, #rule, &[#(#values),*])),
            }
        }
    });
    quote! {
        #lookups
        #(#rules)*
    }
}
