//! Method calls, resolved by the receiver's type (`methods`): scalar methods become free functions (R10),
//! vocabulary methods are copied by name once the receiver's type is known to have them.

use syn::{Expr, ExprMethodCall};

use super::code::Code;
use super::expr::Val;
use super::known::{self, SCALAR_METHODS};
use super::methods::{self, describe};
use super::Lowerer;
use crate::codegen::types::{Scalar, Ty, Vocab};
use crate::codegen::usage;
use crate::codegen::valid;

impl Lowerer<'_> {
    pub(crate) fn method_call(&mut self, m: &ExprMethodCall) -> Val {
        let name = m.method.to_string();
        if valid::rejects_method(&name) {
            // Reported by validation (`.iter()`, `.unwrap()`); lower what it looked at, for the errors inside.
            if !valid::is_iterator_method(&name) {
                self.expr(&m.receiver);
            }
            for a in &m.args {
                self.expr(a);
            }
            return Val::error();
        }
        let recv = self.expr(&m.receiver);
        let arg_exprs: Vec<&Expr> = m.args.iter().collect();
        let args = self.args(m.args.iter());

        if SCALAR_METHODS.contains(&name.as_str()) && takes_scalar_method(&recv.ty, &name) {
            return self.scalar_method(&name, recv, args);
        }
        if name == "clone" && args.is_empty() {
            return recv;
        }
        let (turbofish, type_args) = match &m.turbofish {
            Some(t) => self.type_arguments(&syn::PathArguments::AngleBracketed(syn::AngleBracketedGenericArguments {
                colon2_token: None,
                lt_token: t.lt_token,
                args: t.args.clone(),
                gt_token: t.gt_token,
            })),
            None => (String::new(), Vec::new()),
        };
        let found = match &recv.ty {
            Ty::Error => None,
            // One error per local of unknown type: annotating its `let` fixes every use.
            Ty::Local(id) if !self.untyped_reported.insert(*id) => None,
            Ty::Unknown | Ty::Local(_) => {
                self.cx.error_spanned_by(
                    &m.receiver,
                    format!(
                        "cannot tell the type of this value, so cannot check that C++ has `.{name}()` on it: methods \
                         are resolved by the receiver's vocabulary type, and the macro does not see the return types \
                         of device fns; bind it with a type (`let x: LsaBarrier<'_, Cta> = …;`, `let v: f32 = …;`)"
                    ),
                );
                None
            }
            ty => {
                let found = methods::method(ty, &name, args.len(), type_args.first());
                if found.is_none() {
                    self.not_a_method(m, &name, ty);
                }
                found
            }
        };
        let resolved = found.is_some();
        let mut args = args;
        if resolved {
            if let Some(rule) = usage::method_rule(&name, args.len()) {
                self.apply_rule(&rule, &arg_exprs, &mut args);
            }
            if name == "send" && args.len() == 3 && is_ll_a2a(&recv.ty) {
                self.ll_a2a_peer(&arg_exprs, &mut args, recv.code.clone());
            }
        }
        let recv_ty = recv.ty.clone();
        let arg_tys: Vec<Ty> = args.iter().map(|a| a.ty.clone()).collect();
        let arg_codes: Vec<Code> = args.iter().map(|a| a.code.clone()).collect();
        let ty = match found {
            None => {
                args.iter().for_each(|a| self.escape(&a.ty.clone()));
                Ty::Error
            }
            Some(found) => {
                if found.needs_turbofish && m.turbofish.is_none() {
                    self.cx.error_spanned_by(
                        &m.method,
                        format!(
                            "write the type: `.{name}::<T>(…)`: C++ cannot deduce `{name}`'s type parameter from its \
                             arguments"
                        ),
                    );
                }
                if matches!(found.ret, Ty::Vocab(Vocab::GemmTile, _)) {
                    self.usage.block_of_256 = true;
                }
                if matches!(found.ret, Ty::Vocab(Vocab::GemmTiles, _)) {
                    self.usage.gemm_tiles = true;
                }
                let elem = match &recv.ty {
                    Ty::Vocab(_, Some(e)) | Ty::Window(e) | Ty::Indexable(_, e) => Some((**e).clone()),
                    _ => None,
                };
                for (i, a) in args.iter().enumerate() {
                    let t = a.ty.clone();
                    if let Some((_, s)) = found.fixed.iter().find(|(j, _)| *j == i) {
                        self.unify(&Ty::Scalar(*s), &t);
                    } else if let (true, Some(e)) = (found.elem_args.contains(&i), &elem) {
                        self.unify(e, &t);
                    } else {
                        self.escape(&t);
                    }
                }
                match (found.ret, args.first().map(|a| &a.ty)) {
                    // `dev.lsa_multimem(&w)`: the view's elements are the window's.
                    (Ty::Vocab(Vocab::MultimemView, None), Some(Ty::Window(e))) => {
                        Ty::Vocab(Vocab::MultimemView, Some(e.clone()))
                    }
                    (ret, _) => ret,
                }
            }
        };
        let recv_code = recv.operand();
        let mut code = recv_code.clone();
        if m.turbofish.is_some() {
            // R14: `x.recv::<T>(slot)` → `x.template recv<T'>(slot)`.
            code.push_str(&format!(".template {name}{turbofish}("));
        } else {
            code.push_str(&format!(".{name}("));
        }
        code.push(Code::join(args.into_iter().map(|a| a.code).collect(), ", ")).push_str(")");
        if resolved {
            if let Some(call) = self.method_sites(m, &recv_ty, &arg_tys) {
                // Unproven: `weft::detail::<checker>(receiver, arguments…, line)`, which checks on the device.
                let mut parts = vec![recv_code];
                parts.extend(arg_codes);
                parts.push(Code::text(super::line_of(m).to_string()));
                if call.needs_dev {
                    match self.dev_comm_name() {
                        Some(dev) => parts.push(Code::text(dev)),
                        None => {
                            let span = m.method.span();
                            self.lsa_without_dev.extend(call.sites.iter().map(|s| (*s, span)));
                        }
                    }
                }
                let mut checked = Code::text(format!("weft::detail::{}{turbofish}(", call.checker));
                checked.push(Code::join(parts, ", ")).push_str(")");
                code = Code::site(call.sites, code, checked);
            }
        }
        Val::new(code, ty)
    }

    /// `a2a.send(peer, slot, v)`: the peer is checked on the device against the session's team (the LSA team), in
    /// the form `launch` runs: NCCL indexes the peer's lines of the all-to-all buffer with it.
    fn ll_a2a_peer(&mut self, arg_exprs: &[&Expr], args: &mut [Val], session: Code) {
        let (Some(node), Some(peer)) = (arg_exprs.first().copied(), args.first_mut()) else { return };
        if peer.ty == Ty::Error {
            return;
        }
        let line = super::line_of(node);
        let mut code = Code::text("weft::detail::resource_at(");
        code.push(std::mem::take(&mut peer.code)).push_str(", ");
        code.push(session).push_str(&format!(".team_size(), {line})"));
        peer.code = code;
        peer.atom = true;
        self.usage.device_checks = true;
        self.resource_checks.push(super::ResourceCheck {
            what: "LL all-to-all peers (the LSA team's size)",
            access: quote::quote!(#node).to_string(),
            line: line as u32,
            tokens: quote::quote!(#node),
        });
    }

    fn not_a_method(&self, m: &ExprMethodCall, name: &str, ty: &Ty) {
        let in_vocabulary = known::VOCABULARY_METHODS.contains(&name) || SCALAR_METHODS.contains(&name);
        let message = if in_vocabulary {
            format!(
                "`{name}` is not a method of {} in weft's kernel vocabulary (another vocabulary type has a method \
                 of this name; docs/vocabulary.md lists each type's): C++ has no such member, so nvcc would reject \
                 the kernel",
                describe(ty)
            )
        } else {
            format!(
                "`{name}` is not a method of weft's kernel vocabulary (docs/vocabulary.md lists them): the Rust \
                 standard library does not exist on the GPU; write the operation out with the vocabulary, or in a \
                 #[weft::device_fn]"
            )
        };
        self.cx.error_at(m.method.span(), message);
    }

    /// R10: `x.sqrt()` → `weft::sqrt(x)`; also `f32::sqrt(x)`. The receiver is the first argument of an overload
    /// set that covers every Rust type with the method (so an untyped receiver is fine here).
    pub(crate) fn scalar_method(&mut self, name: &str, recv: Val, args: Vec<Val>) -> Val {
        let recv_ty = recv.ty.clone();
        for a in &args {
            let t = a.ty.clone();
            self.unify_operands(&recv_ty, &t);
        }
        let ty = match name {
            "to_f32" => Ty::Scalar(Scalar::F32),
            "count_ones" => Ty::Scalar(Scalar::U32),
            _ => recv_ty.clone(),
        };
        // C++ would promote a negative `i8`/`i16` to a negative `int` and count 24 or 16 bits too many.
        let first = match (name, &recv_ty) {
            ("count_ones", Ty::Scalar(s @ (Scalar::I8 | Scalar::I16))) => {
                let unsigned = if *s == Scalar::I8 { Scalar::U8 } else { Scalar::U16 };
                let mut c = Code::text(format!("static_cast<{}>(", unsigned.cpp()));
                c.push(recv.code).push_str(")");
                c
            }
            _ => recv.code,
        };
        let mut parts = vec![first];
        parts.extend(args.into_iter().map(|a| a.code));
        let mut code = Code::text(format!("weft::{name}("));
        code.push(Code::join(parts, ", ")).push_str(")");
        Val::new(code, ty)
    }

    /// A session named by value where Rust would move it (`let b = bar;`, `helper(bar)`, `return bar`): C++ can
    /// neither copy nor move a session, so this must be written with a reference or not at all.
    pub(crate) fn check_not_moved(&self, e: &Expr) {
        let mut inner = e;
        while let Expr::Paren(p) = inner {
            inner = &p.expr;
        }
        let Expr::Path(p) = inner else { return };
        let Some(ident) = p.path.get_ident() else { return };
        let Some(id) = self.lookup(&ident.to_string()) else { return };
        if let Ty::Vocab(v, _) = &self.locals[id].ty {
            if v.is_session() {
                let name = v.name();
                self.cx.error_spanned_by(
                    e,
                    format!(
                        "`{ident}` is a `{name}` session, which C++ can neither copy nor move: keep using it where it \
                         was opened, and lend it by reference (`&{ident}`) to a device fn taking `&{name}<'_, Co>`"
                    ),
                );
            } else if v.is_pinned() {
                let name = v.name();
                self.cx.error_spanned_by(
                    e,
                    format!(
                        "`{ident}` is a `{name}`, which cannot be copied or moved ({}): use it where it is, and lend \
                         it by reference (`&{ident}`)",
                        v.why_pinned()
                    ),
                );
            }
        }
    }
}

fn is_ll_a2a(ty: &Ty) -> bool {
    match ty {
        Ty::Ref(inner) => is_ll_a2a(inner),
        Ty::Vocab(Vocab::LlA2a, _) => true,
        _ => false,
    }
}

/// Receivers of R10's scalar methods: numbers (typed or not yet), element type parameters, and `WidePack`'s
/// `sqrt`/`rsqrt`/`mul_add`. A receiver of unknown type is fine: the `weft::` overloads exist for every type that
/// has the method in Rust.
fn takes_scalar_method(ty: &Ty, name: &str) -> bool {
    match ty {
        Ty::Scalar(_) | Ty::Param(_) | Ty::Var(_) | Ty::Unknown | Ty::Local(_) | Ty::Error => true,
        Ty::Ref(inner) => takes_scalar_method(inner, name),
        Ty::Vocab(Vocab::WidePack, _) => matches!(name, "sqrt" | "rsqrt" | "mul_add"),
        _ => false,
    }
}
