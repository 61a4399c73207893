//! Calls: free functions (vocabulary and device fns), associated functions, constructors, methods; and the
//! capabilities and resource indices they imply.

use syn::spanned::Spanned;
use syn::{Expr, ExprCall, ExprMethodCall};

use super::code::Code;
use super::expr::{is_camel, Val};
use super::known::{self, FreeFn, SCALAR_METHODS};
use super::Lowerer;
use crate::codegen::types::{Position, Scalar, Ty};
use crate::codegen::usage::{self, IndexValue, Resource, Rule};

impl Lowerer<'_> {
    /// Lowers call arguments: `&x`/`&mut x` become `x` (R13).
    fn args<'e>(&mut self, args: impl Iterator<Item = &'e Expr>) -> Vec<Val> {
        args.map(|a| self.expr(a)).collect()
    }

    pub(crate) fn call(&mut self, c: &ExprCall) -> Val {
        let Expr::Path(p) = &*c.func else { return Val::error() };
        let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
        let names: Vec<String> = segs.iter().map(|s| s.ident.to_string()).collect();
        let Some(last) = names.last().cloned() else { return Val::error() };
        let prev = if names.len() >= 2 { Some(names[names.len() - 2].clone()) } else { None };
        let args = self.args(c.args.iter());

        // Associated functions: `T::zero()` (R9), `Lanes::from_mask(m)`.
        if let Some(prev) = &prev {
            let prev_seg = segs[segs.len() - 2];
            let scalar = Scalar::from_name(prev);
            let is_param = self.sig.generic_names.elements.contains(prev);
            if scalar.is_some() || is_param {
                let (cpp, self_ty) = match scalar {
                    Some(s) => (s.cpp().to_string(), Ty::Scalar(s)),
                    None => (prev.clone(), Ty::Param(prev.clone())),
                };
                let ty = match last.as_str() {
                    "zero" | "one" => self_ty,
                    "from_f32" => {
                        if let Some(a) = args.first() {
                            let t = a.ty.clone();
                            self.unify(&Ty::Scalar(Scalar::F32), &t);
                        }
                        self_ty
                    }
                    _ => {
                        args.iter().for_each(|a| self.escape(&a.ty.clone()));
                        Ty::Unknown
                    }
                };
                let mut code = Code::text(format!("weft::{last}<{cpp}>("));
                code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
                return Val::new(code, ty);
            }
            if is_camel(prev) {
                if prev == "SharedArray" {
                    self.cx.error_spanned_by(
                        c,
                        "`SharedArray::new()` must initialise a `let` directly: `let s = SharedArray::<T, 256>::new();`",
                    );
                    return Val::error();
                }
                let type_args = self.turbofish(&prev_seg.arguments);
                let fn_args = self.turbofish(&segs[segs.len() - 1].arguments);
                args.iter().for_each(|a| self.escape(&a.ty.clone()));
                let mut code = Code::text(format!("weft::{prev}{type_args}::{last}{fn_args}("));
                code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
                return Val::new(code, Ty::Cpp(format!("weft::{prev}")));
            }
        }

        // Tuple-struct constructors (R7): `SignalInc(s)`.
        if is_camel(&last) {
            if let Some(rule) = usage::constructor_rule(&last) {
                self.apply_rule(&rule, &c.args.iter().collect::<Vec<_>>(), &args);
            }
            if let Some(first) = args.first() {
                let t = first.ty.clone();
                if usage::constructor_rule(&last).is_some_and(|r| r.resource.is_some()) {
                    self.unify(&Ty::Scalar(Scalar::U32), &t);
                }
            }
            args.iter().skip(1).for_each(|a| self.escape(&a.ty.clone()));
            let mut code = Code::text(format!("weft::{last}("));
            code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
            return Val::new(code, Ty::Cpp(format!("weft::{last}")));
        }

        // Free functions: vocabulary or #[device_fn], both `weft::name` in C++.
        if last == "grid_stride" {
            self.cx.error_spanned_by(
                c,
                "`grid_stride(n)` can only be iterated by a `for` loop: `for i in grid_stride(n)`",
            );
        }
        if !known::is_vocabulary_function(&last) {
            self.record_call(&p.path);
        }
        let ty = match known::free_fn(&last) {
            Some(FreeFn::Returns(ty, fixed)) => {
                for (i, s) in fixed {
                    if let Some(a) = args.get(*i) {
                        let t = a.ty.clone();
                        self.unify(&Ty::Scalar(*s), &t);
                    }
                }
                ty
            }
            Some(FreeFn::SameAsArgs(n)) => self.unify_args(&args, n),
            Some(FreeFn::FirstArg(fixed)) => {
                for (i, s) in fixed {
                    if let Some(a) = args.get(*i) {
                        let t = a.ty.clone();
                        self.unify(&Ty::Scalar(*s), &t);
                    }
                }
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
        let index = match (last.as_str(), args.is_empty()) {
            ("block_idx_x", true) => IndexValue::Block(0),
            ("block_idx_y", true) => IndexValue::Block(1),
            ("block_idx_z", true) => IndexValue::Block(2),
            _ => IndexValue::Unknown,
        };
        let generics = self.turbofish(&segs[segs.len() - 1].arguments);
        let mut code = Code::text(format!("weft::{}{generics}(", super::cpp_ident(&last)));
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        Val { code, ty, index, atom: true }
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

    /// `::<A, B>` → `<A', B'>` (mapped types; const arguments as written).
    fn turbofish(&mut self, args: &syn::PathArguments) -> String {
        let syn::PathArguments::AngleBracketed(a) = args else { return String::new() };
        let mut out = Vec::new();
        for arg in &a.args {
            match arg {
                syn::GenericArgument::Type(t) => {
                    if let Some((cpp, _)) = self.mapper().map(t, Position::Local) {
                        out.push(cpp);
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
        if out.is_empty() {
            String::new()
        } else {
            format!("<{}>", out.join(", "))
        }
    }

    pub(crate) fn method_call(&mut self, m: &ExprMethodCall) -> Val {
        let name = m.method.to_string();
        let recv = self.expr(&m.receiver);
        let arg_exprs: Vec<&Expr> = m.args.iter().collect();
        let args = self.args(m.args.iter());

        if SCALAR_METHODS.contains(&name.as_str()) {
            // R10: `x.sqrt()` → `weft::sqrt(x)`.
            let recv_ty = recv.ty.clone();
            for a in &args {
                let t = a.ty.clone();
                self.unify_operands(&recv_ty, &t);
            }
            let ty = match name.as_str() {
                "to_f32" => Ty::Scalar(Scalar::F32),
                "count_ones" => Ty::Scalar(Scalar::U32),
                _ => recv_ty,
            };
            let mut parts = vec![recv.code];
            parts.extend(args.into_iter().map(|a| a.code));
            let mut code = Code::text(format!("weft::{name}("));
            code.push(Code::join(parts, ", ")).push_str(")");
            return Val::new(code, ty);
        }
        if name == "clone" && args.is_empty() {
            return recv;
        }
        // Reported only when validation found nothing more specific (`.iter()` under a rejected `.sum()`, say).
        if !known::VOCABULARY_METHODS.contains(&name.as_str())
            && !known::MIRRORED_RUST_METHODS.contains(&name.as_str())
            && self.cx.error_count() == 0
        {
            self.cx.error_at(
                m.method.span(),
                format!(
                    "`{name}` is not a method of weft's kernel vocabulary (docs/vocabulary.md lists them): the Rust \
                     standard library does not exist on the GPU; write the operation out with the vocabulary, or in \
                     a #[weft::device_fn]"
                ),
            );
        }
        if let Some(rule) = usage::method_rule(&name, args.len()) {
            self.apply_rule(&rule, &arg_exprs, &args);
        }
        let (ty, fixed) = match known::method(&recv.ty, &name) {
            Some((ty, fixed)) => (ty, fixed),
            None => (Ty::Unknown, known::untyped_receiver_method_args(&name)),
        };
        for (i, a) in args.iter().enumerate() {
            let t = a.ty.clone();
            match fixed.iter().find(|(j, _)| *j == i) {
                Some((_, s)) => self.unify(&Ty::Scalar(*s), &t),
                None => self.escape(&t),
            }
        }
        let turbofish = m.turbofish.as_ref().map(|t| {
            let args = syn::PathArguments::AngleBracketed(syn::AngleBracketedGenericArguments {
                colon2_token: None,
                lt_token: t.lt_token,
                args: t.args.clone(),
                gt_token: t.gt_token,
            });
            self.turbofish(&args)
        });
        let mut code = recv.operand();
        match turbofish {
            // R14: `x.recv::<T>(slot)` → `x.template recv<T'>(slot)`.
            Some(t) => code.push_str(&format!(".template {name}{t}(")),
            None => code.push_str(&format!(".{name}(")),
        };
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        Val::new(code, ty)
    }

    /// Records the capabilities and resource index a vocabulary item implies.
    fn apply_rule(&mut self, rule: &Rule, arg_exprs: &[&Expr], args: &[Val]) {
        self.usage.caps = self.usage.caps.union(rule.caps);
        let Some((resource, position)) = rule.resource else { return };
        let Some(arg) = args.get(position) else { return };
        match arg.index {
            IndexValue::Unknown if self.attrs.declared(resource).is_none() => {
                let node = arg_exprs.get(position).map(|e| e.span()).unwrap_or_else(proc_macro2::Span::call_site);
                self.unknown_index(resource, node);
            }
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
