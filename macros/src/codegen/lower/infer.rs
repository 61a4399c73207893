//! Typing untyped literals: rustc knows `let mut acc = 0.0;` is a `T` because of how `acc` is used later; C++
//! would make it a `double`. Every unsuffixed literal gets a type variable; operators, assignments, comparisons,
//! indexing and the few vocabulary signatures the lowering knows unify it with the other side. A variable that
//! meets an expression of unknown type is marked *escaped*; a `let` whose type stays unknown and escaped is an
//! error asking for an annotation, one that never escapes takes Rust's fallback (`i32`, `f64`).

use crate::codegen::types::Ty;

#[derive(Debug, Clone)]
struct Var {
    parent: usize,
    float: bool,
    binding: Option<Ty>,
    escaped: bool,
    /// Where the oldest variable of the set was created: a `decltype(local)` binding must name a local that is
    /// in scope there.
    origin: Origin,
}

/// A point in the body: declaration sequence number and the chain of enclosing scope ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) seq: usize,
    pub(crate) scopes: Vec<usize>,
}

impl Origin {
    /// Whether a local declared at `decl` is visible at `self`.
    pub(crate) fn sees(&self, decl: &Origin) -> bool {
        decl.seq < self.seq && self.scopes.starts_with(&decl.scopes)
    }
}

#[derive(Debug, Default)]
pub(crate) struct Vars {
    vars: Vec<Var>,
}

impl Vars {
    pub(crate) fn fresh(&mut self, float: bool, origin: Origin) -> usize {
        let id = self.vars.len();
        self.vars.push(Var { parent: id, float, binding: None, escaped: false, origin });
        id
    }

    fn root(&self, mut v: usize) -> usize {
        while self.vars[v].parent != v {
            v = self.vars[v].parent;
        }
        v
    }

    pub(crate) fn binding(&self, v: usize) -> Option<Ty> {
        self.vars[self.root(v)].binding.clone()
    }

    pub(crate) fn is_float(&self, v: usize) -> bool {
        self.vars[self.root(v)].float
    }

    pub(crate) fn escaped(&self, v: usize) -> bool {
        self.vars[self.root(v)].escaped
    }

    pub(crate) fn escape(&mut self, v: usize) {
        let r = self.root(v);
        self.vars[r].escaped = true;
    }

    /// Binds the set of `v` to a concrete type, unless it is bound already (rustc has checked the program, so a
    /// second binding is the same type spelled differently). `visible` says whether a `Ty::Local` is usable at
    /// the set's origin.
    pub(crate) fn bind(&mut self, v: usize, ty: Ty, visible: impl Fn(&Origin) -> bool) {
        let r = self.root(v);
        if self.vars[r].binding.is_some() {
            return;
        }
        if let Ty::Local(_) = ty {
            if !visible(&self.vars[r].origin) {
                self.vars[r].escaped = true;
                return;
            }
        }
        self.vars[r].binding = Some(ty);
    }

    pub(crate) fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra == rb {
            return;
        }
        // Keep the older variable as the root: its origin is the earliest point the set's type must be spelled.
        let (keep, drop) = if self.vars[ra].origin.seq <= self.vars[rb].origin.seq { (ra, rb) } else { (rb, ra) };
        self.vars[drop].parent = keep;
        let dropped = self.vars[drop].clone();
        let k = &mut self.vars[keep];
        k.escaped |= dropped.escaped;
        k.float |= dropped.float;
        if k.binding.is_none() {
            k.binding = dropped.binding;
        }
    }
}
