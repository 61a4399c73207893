//! Calls of paths: free functions (vocabulary and device fns), associated functions of scalars and vocabulary types,
//! tuple-struct constructors; and the capabilities and resource indices they imply. Method calls are in
//! `method_calls`.

use syn::spanned::Spanned;
use syn::{Expr, ExprCall};

use super::code::Code;
use super::expr::{is_camel, Val};
use super::known::{self, FreeFn, SCALAR_METHODS};
use super::methods;
use super::Lowerer;
use super::ResourceCheck;
use crate::codegen::attr::Declared;
use crate::codegen::types::{Position, Scalar, Ty, Vocab};
use crate::codegen::usage::{self, IndexValue, Resource, Rule};
use crate::codegen::valid;

impl Lowerer<'_> {
    /// Lowers call arguments: `&x`/`&mut x` become `x` (R13). A session passed by value is an error: C++ can neither
    /// copy nor move one.
    pub(crate) fn args<'e>(&mut self, args: impl Iterator<Item = &'e Expr>) -> Vec<Val> {
        args.map(|a| {
            self.check_not_moved(a);
            self.expr(a)
        })
        .collect()
    }

    pub(crate) fn call(&mut self, c: &ExprCall) -> Val {
        let args = self.args(c.args.iter());
        // Validation reported this call (`Some(x)`, recursion, a `std::` path): nothing more to say.
        if valid::call_problem(c, &self.sig.ident.to_string()).is_some() {
            return Val::error();
        }
        let Expr::Path(p) = &*c.func else { return Val::error() };
        let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
        let Some(last_seg) = segs.last() else { return Val::error() };
        let last = last_seg.ident.to_string();

        if segs.len() >= 2 {
            let type_seg = segs[segs.len() - 2];
            let prev = type_seg.ident.to_string();
            let scalar = Scalar::from_name(&prev);
            let is_element_param =
                self.sig.generic_names.elements.contains(&prev) && !self.sig.generic_names.coops.contains(&prev);
            if scalar.is_some() || is_element_param {
                return self.scalar_associated(c, &prev, scalar, &last, args);
            }
            if is_camel(&prev) {
                return self.type_associated(c, type_seg, last_seg, args);
            }
        }
        if is_camel(&last) {
            return self.constructor(c, &last, args);
        }
        if segs.len() == 1 && p.path.leading_colon.is_none() {
            if let Some(id) = self.lookup(&last) {
                // Calling a local: a closure (rejected where it was written) or a value rustc rejects.
                if self.locals[id].ty != Ty::Error {
                    self.cx.error_spanned_by(
                        &c.func,
                        format!(
                            "`{last}` is a local value, not a function: call vocabulary functions and \
                             #[weft::device_fn]s by name"
                        ),
                    );
                }
                return Val::error();
            }
        }
        self.free_function(c, p, &last, args)
    }

    /// A vocabulary function or a #[device_fn], both `weft::name` in C++.
    fn free_function(&mut self, c: &ExprCall, p: &syn::ExprPath, last: &str, args: Vec<Val>) -> Val {
        if last == "grid_stride" {
            self.cx.error_spanned_by(
                c,
                "`grid_stride(n)` can only be iterated by a `for` loop: `for i in grid_stride(n)`",
            );
        }
        if !known::is_vocabulary_function(last) {
            self.record_call(&p.path);
        }
        let ty = match known::free_fn(last) {
            Some(FreeFn::Returns(ty, fixed)) => {
                self.unify_fixed(&args, fixed);
                ty
            }
            Some(FreeFn::SameAsArgs(n)) => self.unify_args(&args, n),
            Some(FreeFn::FirstArg(fixed)) => {
                self.unify_fixed(&args, fixed);
                args.first().map(|a| a.ty.clone()).unwrap_or(Ty::Unknown)
            }
            Some(FreeFn::Atomic { shared, returns }) => {
                let t = self.unify_args(&args, shared);
                if returns {
                    t
                } else {
                    Ty::Unit
                }
            }
            None => {
                args.iter().for_each(|a| self.escape(&a.ty.clone()));
                Ty::Unknown
            }
        };
        let index = match (last, args.is_empty()) {
            ("block_idx_x", true) => IndexValue::Block(0),
            ("block_idx_y", true) => IndexValue::Block(1),
            ("block_idx_z", true) => IndexValue::Block(2),
            _ => IndexValue::Unknown,
        };
        let generics = match p.path.segments.last() {
            Some(seg) => self.type_arguments(&seg.arguments).0,
            None => String::new(),
        };
        let arg_codes: Vec<Code> = args.iter().map(|a| a.code.clone()).collect();
        // A device fn's C++ name is its mangled one (names.rs); the vocabulary's are weft.cuh's.
        let cpp_name = if known::is_vocabulary_function(last) { last.to_string() } else { super::cpp_ident(last) };
        let mut code = Code::text(format!("weft::{cpp_name}{generics}("));
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        if let Some(call) = self.function_sites(c, last) {
            let mut parts = arg_codes;
            parts.push(Code::text(super::line_of(c).to_string()));
            let mut checked = Code::text(format!("weft::detail::{}{generics}(", call.checker));
            checked.push(Code::join(parts, ", ")).push_str(")");
            code = Code::site(call.sites, code, checked);
        }
        Val { code, ty, index, atom: true }
    }

    /// `T::zero()`, `f32::from_f32(v)` (R9); `f32::sqrt(x)` is `x.sqrt()` (R10). Anything else has no C++ form.
    fn scalar_associated(
        &mut self,
        c: &ExprCall,
        prev: &str,
        scalar: Option<Scalar>,
        name: &str,
        mut args: Vec<Val>,
    ) -> Val {
        let (cpp, self_ty) = match scalar {
            Some(s) => (s.cpp().to_string(), Ty::Scalar(s)),
            None => (super::cpp_ident(prev), Ty::Param(prev.to_string())),
        };
        match (name, args.len()) {
            ("zero" | "one", 0) => Val::new(Code::text(format!("weft::{name}<{cpp}>()")), self_ty),
            ("from_f32", 1) => {
                let arg = args.remove(0);
                self.unify(&Ty::Scalar(Scalar::F32), &arg.ty);
                let mut code = Code::text(format!("weft::from_f32<{cpp}>("));
                code.push(arg.code).push_str(")");
                Val::new(code, self_ty)
            }
            (_, n) if n > 0 && SCALAR_METHODS.contains(&name) => {
                let mut recv = args.remove(0);
                self.unify(&self_ty, &recv.ty);
                if !matches!(recv.ty, Ty::Scalar(_) | Ty::Param(_)) {
                    recv.ty = self_ty;
                }
                self.scalar_method(name, recv, args)
            }
            _ => {
                let hint = if matches!(name, "from" | "try_from" | "into" | "from_bits" | "to_bits") {
                    format!("convert with `as` (`x as {prev}`)")
                } else {
                    "write it with the vocabulary (docs/vocabulary.md) or in a #[weft::device_fn]".to_string()
                };
                self.cx.error_spanned_by(
                    &c.func,
                    format!(
                        "`{prev}::{name}` is not in weft's kernel vocabulary: C++ has no `weft::{name}` for `{prev}` \
                         (the associated functions kernels know are `zero`, `one`, `from_f32` and the scalar \
                         methods `{prev}::sqrt(x)`, `{prev}::min(a, b)`, …); {hint}"
                    ),
                );
                Val::error()
            }
        }
    }

    /// `Lanes::from_mask(m)`, `Pack::<T>::splat(v)`: associated functions of vocabulary types.
    fn type_associated(
        &mut self,
        c: &ExprCall,
        type_seg: &syn::PathSegment,
        fn_seg: &syn::PathSegment,
        args: Vec<Val>,
    ) -> Val {
        let prev = type_seg.ident.to_string();
        let name = fn_seg.ident.to_string();
        if prev == "SharedArray" {
            self.cx.error_spanned_by(
                c,
                "`SharedArray::new()` must initialise a `let` directly: `let s = SharedArray::<T, 256>::new();`",
            );
            return Val::error();
        }
        let Some(v) = Vocab::from_name(&prev).filter(|v| *v != Vocab::AnyCoop) else {
            let message = if matches!(prev.as_str(), "DevComm" | "Window" | "WindowView") {
                format!("call `{name}` as a method (`x.{name}(…)`): C++ has no `weft::{prev}::{name}` function")
            } else {
                format!(
                    "`{prev}` is not a type of weft's kernel vocabulary (docs/vocabulary.md §2 lists them): C++ has \
                     no `weft::{prev}::{name}`"
                )
            };
            self.cx.error_spanned_by(&c.func, message);
            return Val::error();
        };
        let Some(found) = methods::associated_fn(v, &name, args.len()) else {
            let is_method = methods::method(&Ty::Vocab(v, None), &name, args.len().saturating_sub(1), None).is_some();
            let message = if is_method {
                format!("`{name}` is a method of `{prev}`: call it as one (`x.{name}(…)`), as C++ does")
            } else {
                format!(
                    "`{prev}::{name}` is not an associated function of `{prev}` in weft's kernel vocabulary \
                     (docs/vocabulary.md): C++ has no `weft::{prev}::{name}`"
                )
            };
            self.cx.error_spanned_by(&c.func, message);
            return Val::error();
        };
        self.unify_fixed(&args, found.fixed);
        let (type_text, type_args) = self.type_arguments(&type_seg.arguments);
        let (fn_text, _) = self.type_arguments(&fn_seg.arguments);
        let (type_text, ty) = match v {
            Vocab::Pack | Vocab::WidePack => {
                // C++ needs the class template's argument; `Pack::splat(v)` can take it from `v`.
                let from_value = match (v, args.first().map(|a| &a.ty)) {
                    (Vocab::Pack, Some(t @ (Ty::Scalar(_) | Ty::Param(_)))) => {
                        Some((format!("<{}>", spell(t)), t.clone()))
                    }
                    _ => None,
                };
                match type_args.into_iter().next().map(|t| (type_text, t)).or(from_value) {
                    Some((text, elem)) => {
                        if v == Vocab::Pack {
                            if let Some(a) = args.first() {
                                let t = a.ty.clone();
                                self.unify(&elem, &t);
                            }
                        }
                        (text, Ty::Vocab(v, Some(Box::new(elem))))
                    }
                    None => {
                        self.cx.error_spanned_by(
                            &c.func,
                            format!(
                                "write the element type: `{prev}::<T>::{name}(…)`: C++ cannot deduce it from the \
                                 arguments"
                            ),
                        );
                        return Val::error();
                    }
                }
            }
            _ => (type_text, found.ret),
        };
        let mut code = Code::text(format!("weft::{prev}{type_text}::{name}{fn_text}("));
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        Val::new(code, ty)
    }

    /// Tuple-struct constructors (R7): `SignalInc(s)`.
    fn constructor(&mut self, c: &ExprCall, last: &str, mut args: Vec<Val>) -> Val {
        let Some(v) = Vocab::from_name(last).filter(|v| v.tuple_fields().is_some()) else {
            self.cx.error_spanned_by(
                &c.func,
                format!(
                    "`{last}` is not a constructor of weft's kernel vocabulary (the GIN actions `SignalInc(s)`, \
                     `SignalAdd(s, v)`, `CounterInc(c)`, …): C++ has no `weft::{last}`"
                ),
            );
            return Val::error();
        };
        let rule = usage::constructor_rule(last);
        if let Some(rule) = &rule {
            self.apply_rule(rule, &c.args.iter().collect::<Vec<_>>(), &mut args);
        }
        if let Some(first) = args.first() {
            let t = first.ty.clone();
            if rule.is_some_and(|r| r.resource.is_some()) {
                self.unify(&Ty::Scalar(Scalar::U32), &t);
            }
        }
        args.iter().skip(1).for_each(|a| self.escape(&a.ty.clone()));
        let mut code = Code::text(format!("weft::{last}("));
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        Val::new(code, Ty::Vocab(v, None))
    }

    /// Literals among `args` at the listed positions take those types.
    pub(crate) fn unify_fixed(&mut self, args: &[Val], fixed: &[(usize, Scalar)]) {
        for (i, s) in fixed {
            if let Some(a) = args.get(*i) {
                let t = a.ty.clone();
                self.unify(&Ty::Scalar(*s), &t);
            }
        }
    }

    /// Unifies the first `n` arguments; their common type.
    fn unify_args(&mut self, args: &[Val], n: usize) -> Ty {
        let tys: Vec<Ty> = args.iter().take(n).map(|a| a.ty.clone()).collect();
        for w in tys.windows(2) {
            self.unify_operands(&w[0], &w[1]);
        }
        for a in args.iter().skip(n) {
            let t = a.ty.clone();
            self.escape(&t);
        }
        tys.iter().find(|t| !matches!(t, Ty::Var(_) | Ty::Unknown)).or(tys.first()).cloned().unwrap_or(Ty::Unknown)
    }

    /// Remembers a called free function for the generated module (its companion holds device-fn source).
    fn record_call(&mut self, path: &syn::Path) {
        let mut path = path.clone();
        for seg in path.segments.iter_mut() {
            seg.arguments = syn::PathArguments::None;
        }
        let key = quote::quote!(#path).to_string();
        if !self.calls.iter().any(|p| quote::quote!(#p).to_string() == key) {
            self.calls.push(path);
        }
    }

    /// `::<A, B>` → `<A', B'>` (mapped types; const arguments as written), and what the lowering knows of the
    /// types.
    pub(crate) fn type_arguments(&mut self, args: &syn::PathArguments) -> (String, Vec<Ty>) {
        let syn::PathArguments::AngleBracketed(a) = args else { return (String::new(), Vec::new()) };
        let mut out = Vec::new();
        let mut tys = Vec::new();
        for arg in &a.args {
            match arg {
                syn::GenericArgument::Type(t) => {
                    if let Some((cpp, ty)) = self.mapper().map(t, Position::Local) {
                        out.push(cpp);
                        tys.push(ty);
                    }
                }
                syn::GenericArgument::Const(e) => {
                    if let Some(t) = crate::codegen::types::const_arg_text(e, self.cx) {
                        out.push(t);
                    }
                }
                syn::GenericArgument::Lifetime(_) => {}
                other => self.cx.error_spanned_by(other, "this generic argument is not supported in kernels"),
            }
        }
        let text = if out.is_empty() { String::new() } else { format!("<{}>", out.join(", ")) };
        (text, tys)
    }

    /// Records the capabilities and resource index a vocabulary item implies.
    /// The capabilities a vocabulary call implies, and the resource index among its arguments: a constant or block
    /// index sizes `requirements(&cfg)`; any other index needs a declared count, and is checked against it on the
    /// device (`args`' code becomes `weft::detail::resource_at(index, count, line)`): the launch checked that the
    /// communicator has at least the declared count, so an index below it stays inside NCCL's resources.
    pub(crate) fn apply_rule(&mut self, rule: &Rule, arg_exprs: &[&Expr], args: &mut [Val]) {
        self.usage.caps = self.usage.caps.union(rule.caps);
        let Some((resource, position)) = rule.resource else { return };
        let Some(arg) = args.get_mut(position) else { return };
        let node = arg_exprs.get(position).copied();
        match arg.index {
            // An index already reported as an error says nothing more.
            _ if arg.ty == Ty::Error => {}
            IndexValue::Unknown => match self.attrs.declared(resource) {
                None => {
                    let span = node.map(|e| e.span()).unwrap_or_else(proc_macro2::Span::call_site);
                    self.unknown_index(resource, span);
                }
                Some(declared) => {
                    let bound = match declared {
                        Declared::Count(n) => format!("{n}u"),
                        // `= grid`: one per block along x, what `requirements(&cfg)` asks for.
                        Declared::Grid => "weft::grid_dim_x()".to_string(),
                    };
                    let line = node.map(super::line_of).unwrap_or(0);
                    let mut code = Code::text("weft::detail::resource_at(");
                    code.push(std::mem::take(&mut arg.code)).push_str(&format!(", {bound}, {line})"));
                    arg.code = code;
                    arg.atom = true;
                    self.usage.device_checks = true;
                    let access = node.map(|e| quote::quote!(#e).to_string()).unwrap_or_default();
                    let tokens = node.map(|e| quote::quote!(#e)).unwrap_or_default();
                    self.resource_checks.push(ResourceCheck {
                        what: resource.describe(),
                        access,
                        line: line as u32,
                        tokens,
                    });
                }
            },
            index => self.usage.add_index(resource, index),
        }
    }

    fn unknown_index(&self, resource: Resource, span: proc_macro2::Span) {
        let which = match self.sig.kind {
            crate::codegen::ast::FnKind::Kernel => "kernel",
            crate::codegen::ast::FnKind::DeviceFn => "device_fn",
        };
        self.cx.error_at(
            span,
            format!(
                "cannot tell how many {} this needs from this index: use a constant or `block_idx_x()` (or an \
                 immutable local holding one), or declare the count: `#[{which}({} = N)]` (or `= grid` for one per \
                 block)",
                resource.describe(),
                resource.attribute()
            ),
        );
    }
}

/// The C++ spelling of an element type.
pub(crate) fn spell(ty: &Ty) -> String {
    match ty {
        Ty::Scalar(s) => s.cpp().to_string(),
        Ty::Param(p) => super::cpp_ident(p),
        _ => "auto".to_string(),
    }
}
