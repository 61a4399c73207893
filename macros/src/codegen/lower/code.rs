//! C++ text with holes: literals and declared types whose C++ type is only known once the whole body has been
//! seen (see `infer`). Rendered after lowering.

use super::infer::Vars;
use crate::codegen::bounds::{Bounds, Decision, SiteId};
use crate::codegen::types::{float_text, Scalar, Ty};

#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    /// An unsuffixed literal typed by unification.
    Lit {
        var: usize,
        text: String,
        float: bool,
    },
    /// The C++ spelling of a type that may contain type variables.
    Ty(Ty),
    /// `static_cast<T>(code)` if the variable resolves to an integer type C++ promotes to `int`, else `code`.
    Promote(usize, Code),
    /// A memory access: `plain` if every one of its sites is proven in bounds, else `checked` (the
    /// `weft::detail::*_at` form, which checks it on the device when the kernel is compiled with checks).
    Site {
        sites: Vec<SiteId>,
        plain: Code,
        checked: Code,
    },
}

/// A fragment of C++.
#[derive(Clone, Debug, Default)]
pub(crate) struct Code(Vec<Piece>);

impl Code {
    pub(crate) fn new() -> Code {
        Code(Vec::new())
    }

    pub(crate) fn text(s: impl Into<String>) -> Code {
        Code(vec![Piece::Text(s.into())])
    }

    pub(crate) fn literal(var: usize, text: String, float: bool) -> Code {
        Code(vec![Piece::Lit { var, text, float }])
    }

    pub(crate) fn ty(ty: Ty) -> Code {
        Code(vec![Piece::Ty(ty)])
    }

    pub(crate) fn promote(var: usize, inner: Code) -> Code {
        Code(vec![Piece::Promote(var, inner)])
    }

    /// An access whose C++ depends on whether `sites` are proven in bounds (decided once the body is lowered).
    pub(crate) fn site(sites: Vec<SiteId>, plain: Code, checked: Code) -> Code {
        Code(vec![Piece::Site { sites, plain, checked }])
    }

    pub(crate) fn push_str(&mut self, s: &str) -> &mut Code {
        match self.0.last_mut() {
            Some(Piece::Text(t)) => t.push_str(s),
            _ => self.0.push(Piece::Text(s.to_string())),
        }
        self
    }

    pub(crate) fn push(&mut self, other: Code) -> &mut Code {
        for p in other.0 {
            match p {
                Piece::Text(t) => {
                    self.push_str(&t);
                }
                p => self.0.push(p),
            }
        }
        self
    }

    /// `parts` joined by `sep`.
    pub(crate) fn join(parts: Vec<Code>, sep: &str) -> Code {
        let mut out = Code::new();
        for (i, p) in parts.into_iter().enumerate() {
            if i > 0 {
                out.push_str(sep);
            }
            out.push(p);
        }
        out
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.iter().all(|p| matches!(p, Piece::Text(t) if t.is_empty()))
    }

    /// `(self)`.
    pub(crate) fn parens(self) -> Code {
        let mut out = Code::text("(");
        out.push(self);
        out.push_str(")");
        out
    }

    pub(crate) fn render(&self, r: &Resolver<'_>) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Lit { var, text, float } => out.push_str(&r.literal(*var, text, *float)),
                Piece::Ty(ty) => out.push_str(&r.ty(ty)),
                Piece::Promote(var, inner) => match r.vars.binding(*var) {
                    Some(Ty::Scalar(s)) if s.promotes() => {
                        out.push_str(&format!("static_cast<{}>({})", s.cpp(), inner.render(r)))
                    }
                    _ => out.push_str(&inner.render(r)),
                },
                Piece::Site { sites, plain, checked } => {
                    let proven = sites.iter().all(|s| r.bounds.decision(*s) != Decision::OnDevice);
                    out.push_str(&if proven { plain.render(r) } else { checked.render(r) })
                }
            }
        }
        out
    }
}

/// Renders holes once every type variable is as resolved as it will get.
pub(crate) struct Resolver<'a> {
    pub(crate) vars: &'a Vars,
    /// C++ names of locals, by local id (for `decltype(name)`).
    pub(crate) local_names: &'a [String],
    /// Which accesses are proven in bounds.
    pub(crate) bounds: &'a Bounds,
}

impl Resolver<'_> {
    pub(crate) fn ty(&self, ty: &Ty) -> String {
        match ty {
            Ty::Scalar(s) => s.cpp().to_string(),
            Ty::Param(p) => super::cpp_ident(p),
            Ty::Tuple(elems) => {
                format!(
                    "weft_tuple{}<{}>",
                    elems.len(),
                    elems.iter().map(|e| self.ty(e)).collect::<Vec<_>>().join(", ")
                )
            }
            Ty::Var(v) => match self.vars.binding(*v) {
                Some(bound) => self.ty(&bound),
                None if self.vars.is_float(*v) => "double".into(),
                None => "int32_t".into(),
            },
            Ty::Local(id) => format!("decltype({})", self.local_names[*id]),
            Ty::Ref(inner) => self.ty(inner),
            Ty::Indexable(..) | Ty::Window(_) | Ty::DevComm | Ty::Vocab(..) | Ty::Unit | Ty::Unknown | Ty::Error => {
                "auto".into()
            }
        }
    }

    fn literal(&self, var: usize, text: &str, float: bool) -> String {
        match self.vars.binding(var) {
            Some(Ty::Scalar(s)) if float => s.float_literal(text),
            Some(Ty::Scalar(s)) => s.int_literal(text),
            Some(Ty::Param(p)) if float => format!("{}({})", super::cpp_ident(&p), float_text(text)),
            Some(Ty::Param(p)) => format!("{}({text})", super::cpp_ident(&p)),
            Some(Ty::Local(id)) => format!("decltype({})({text})", self.local_names[id]),
            _ if float => Scalar::F64.float_literal(text),
            _ => text.to_string(),
        }
    }
}
