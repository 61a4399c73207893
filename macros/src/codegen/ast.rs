//! The signature of a `#[kernel]` or `#[device_fn]`, checked and classified: generic parameters (element types
//! vs capability sets), parameters by ABI kind (docs/kernel-abi.md), the return type.

use syn::{FnArg, GenericParam, Ident, ItemFn, Pat, ReturnType, Type, TypeParamBound, WherePredicate};

use super::attr::Attributes;
use super::ctxt::Ctxt;
use super::types::{last_ident, strip_group, GenericNames, Position, Scalar, Ty, TypeMapper};
use super::usage::Caps;

/// Which macro the function is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FnKind {
    Kernel,
    DeviceFn,
}

/// An element type parameter (`T: Float`): a C++ template parameter; kernels instantiate it.
#[derive(Debug, Clone)]
pub(crate) struct ElementParam {
    pub(crate) ident: Ident,
    /// The bounds as written (copied onto the launcher).
    pub(crate) bounds: Vec<TypeParamBound>,
    /// The types to instantiate (kernels only; empty for device fns).
    pub(crate) instantiate: Vec<Scalar>,
    /// Where each of `instantiate` was written (in `types(…)`; the parameter for a default list).
    pub(crate) instantiate_spans: Vec<proc_macro2::Span>,
}

/// A capability-set parameter (`C: HasLsa`): erased in C++.
#[derive(Debug, Clone)]
pub(crate) struct CapParam {
    pub(crate) ident: Ident,
    pub(crate) caps: Caps,
}

/// How a parameter crosses the host/device boundary.
#[derive(Debug, Clone)]
pub(crate) enum ParamKind {
    /// `&DevComm<C>`: the capability set it declares, and the generic parameter if `C` is one.
    DevComm { declared: Caps, generic: Option<Ident> },
    /// `&Window<T>`.
    Window { elem: Type },
    /// `&[T]` / `&mut [T]`.
    Slice { elem: Type, mutable: bool },
    /// A scalar (or element type parameter) by value.
    Scalar { rust: Type },
    /// `LlA2aHandle`: the launcher takes the host's handle (made by the device communicator) and pushes NCCL's bytes.
    LlA2aHandle,
    /// `TmaMatrix<T>` (`sharded: false`): a tensor map and the matrix's shape, by value (a `__grid_constant__`
    /// parameter); `TmaShards<T>` (`sharded: true`): one map per LSA rank, the same way.
    TmaMatrix { elem: Type, sharded: bool },
    /// Anything else a device fn may take (a barrier session by reference, `&mut u32`, a `Team`).
    Other,
}

#[derive(Debug, Clone)]
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) rust_ty: Type,
    /// The C++ spelling in the body function (template parameters unsubstituted).
    pub(crate) cpp_ty: String,
    pub(crate) ty: Ty,
    pub(crate) kind: ParamKind,
}

/// A checked signature.
#[derive(Debug, Clone)]
pub(crate) struct Signature {
    pub(crate) kind: FnKind,
    pub(crate) ident: Ident,
    pub(crate) elements: Vec<ElementParam>,
    pub(crate) params: Vec<Param>,
    pub(crate) ret_cpp: String,
    pub(crate) ret_ty: Ty,
    pub(crate) generic_names: GenericNames,
}

impl Signature {
    /// The function's C++ name.
    pub(crate) fn cpp_name(&self) -> String {
        super::lower::cpp_ident(&self.ident.to_string())
    }

    /// Capabilities the signature's `DevComm<C>` declares.
    pub(crate) fn declared_caps(&self) -> Caps {
        self.params
            .iter()
            .filter_map(|p| match &p.kind {
                ParamKind::DevComm { declared, .. } => Some(*declared),
                _ => None,
            })
            .fold(Caps::NONE, Caps::union)
    }

    /// Every combination of the element parameters' instantiation lists, in declaration order.
    pub(crate) fn instantiations(&self) -> Vec<Vec<Scalar>> {
        let mut out: Vec<Vec<Scalar>> = vec![Vec::new()];
        for e in &self.elements {
            out = out
                .into_iter()
                .flat_map(|prefix| {
                    e.instantiate.iter().map(move |s| {
                        let mut v = prefix.clone();
                        v.push(*s);
                        v
                    })
                })
                .collect();
        }
        out
    }

    /// `k` or `k__f32__i32` (a name C++ reserves gets a trailing `_`, a raw identifier loses its `r#`).
    pub(crate) fn entry_point(&self, types: &[Scalar]) -> String {
        let mut name = self.cpp_name();
        for t in types {
            name.push_str("__");
            name.push_str(t.rust());
        }
        name
    }
}

/// Bounds that say nothing about which element types qualify.
const NEUTRAL_BOUNDS: &[&str] = &["Element", "Numeric", "Copy", "Clone", "Send", "Sync", "Default"];

/// The element types `weft-device` implements each narrowing trait for (checked against its sources by a test).
pub(crate) const TRAIT_TYPES: &[(&str, &[Scalar])] = {
    use Scalar::*;
    &[
        ("Float", &[F32, F64, F16, Bf16]),
        ("Shuffle", &[F16, Bf16, F32, F64, I32, U32, I64, U64]),
        ("AtomicAdd", &[I32, U32, I64, U64, F32, F64, F16, Bf16]),
        ("AtomicMinMax", &[I32, U32, I64, U64]),
        ("AtomicBits", &[I32, U32, I64, U64, F32, F64]),
        ("MultimemElement", &[F32, F16, Bf16, F64, I32, U32, U64]),
    ]
};

/// The default instantiation list for a parameter with these bounds: `Float`'s list (`f32, bf16`) or `Element`'s
/// (`f32, bf16, f16, f64, i32, u32, i64, u64`), keeping the types every narrowing bound (`Shuffle`, `AtomicAdd`, …)
/// allows. `None` when a bound is not one the macro knows, or nothing is left.
fn default_types(bounds: &[String]) -> Option<Vec<Scalar>> {
    let base = if bounds.iter().any(|b| b == "Float") { Scalar::FLOAT_DEFAULT } else { Scalar::ELEMENT_DEFAULT };
    let mut keep: Vec<Scalar> = base.to_vec();
    for bound in bounds {
        if NEUTRAL_BOUNDS.contains(&bound.as_str()) {
            continue;
        }
        let (_, allowed) = TRAIT_TYPES.iter().find(|(t, _)| t == bound)?;
        keep.retain(|s| allowed.contains(s));
    }
    (!keep.is_empty()).then_some(keep)
}

/// The checked signature, and whether it is complete (no errors): an incomplete one still lets the body be lowered
/// (so its errors are reported with the signature's), but no module is generated from it. Parameters that could not
/// be understood are kept with the type [`Ty::Error`], so the body's uses of them say nothing more.
pub(crate) fn parse(kind: FnKind, item: &ItemFn, attrs: &Attributes, cx: &Ctxt) -> (Signature, bool) {
    let errors_before = cx.error_count();
    let sig = &item.sig;
    if let Some(t) = &sig.asyncness {
        cx.error_spanned_by(t, "kernels cannot be `async`: remove it");
    }
    if let Some(t) = &sig.unsafety {
        cx.error_spanned_by(t, "`unsafe` is not supported in kernels: remove it (the vocabulary is safe)");
    }
    if let Some(t) = &sig.constness {
        cx.error_spanned_by(t, "kernels cannot be `const fn`: remove `const`");
    }
    if let Some(abi) = &sig.abi {
        cx.error_spanned_by(abi, "remove the `extern` ABI: the macro writes the C++ entry point");
    }
    if let Some(v) = &sig.variadic {
        cx.error_spanned_by(v, "variadic functions are not supported in kernels");
    }
    // A kernel body calling `min(a, b)` gets the vocabulary's `weft::min`, whatever rustc resolved the name to: a
    // device fn of that name would be type-checked as the callee and never run.
    let name = syn::ext::IdentExt::unraw(&sig.ident).to_string();
    if kind == FnKind::DeviceFn && super::lower::known::is_vocabulary_function(&name) {
        cx.error_spanned_by(
            &sig.ident,
            format!(
                "a device fn cannot be named `{name}`: kernels calling `{name}(…)` get the vocabulary's `{name}`; \
                 rename it"
            ),
        );
    }

    // Generic parameters.
    let mut elements = Vec::new();
    let mut capabilities = Vec::new();
    let mut bounds_of: Vec<(Ident, Vec<TypeParamBound>)> = Vec::new();
    for param in &sig.generics.params {
        match param {
            GenericParam::Lifetime(_) => {}
            GenericParam::Const(c) => cx.error_spanned_by(
                c,
                "const generics are not supported in kernels: pass the value as a parameter, or write a literal",
            ),
            GenericParam::Type(t) => {
                if let Some(d) = &t.default {
                    cx.error_spanned_by(d, "remove the default: kernel type parameters are instantiated by the macro");
                }
                bounds_of.push((t.ident.clone(), t.bounds.iter().cloned().collect()));
            }
        }
    }
    if let Some(wc) = &sig.generics.where_clause {
        for pred in &wc.predicates {
            match pred {
                WherePredicate::Type(pt) => {
                    let Some(name) = type_param_name(&pt.bounded_ty) else {
                        cx.error_spanned_by(&pt.bounded_ty, "where-clauses in kernels can only bound type parameters");
                        continue;
                    };
                    match bounds_of.iter_mut().find(|(i, _)| *i == name) {
                        Some((_, b)) => b.extend(pt.bounds.iter().cloned()),
                        None => cx.error_spanned_by(
                            &pt.bounded_ty,
                            "where-clauses in kernels can only bound type parameters",
                        ),
                    }
                }
                other => cx.error_spanned_by(other, "only type-parameter bounds are supported in kernel where-clauses"),
            }
        }
    }
    for (ident, bounds) in bounds_of {
        let names: Vec<String> = bounds
            .iter()
            .filter_map(|b| match b {
                TypeParamBound::Trait(t) => t.path.segments.last().map(|s| s.ident.to_string()),
                _ => None,
            })
            .collect();
        let cap_bounds: Vec<Caps> = names.iter().filter_map(|n| Caps::from_bound(n)).collect();
        if !cap_bounds.is_empty() {
            if cap_bounds.len() != names.len() {
                cx.error_spanned_by(
                    &ident,
                    format!("`{ident}` mixes capability bounds (HasLsa, …) with element bounds: use two parameters"),
                );
            }
            capabilities.push(CapParam { caps: cap_bounds.into_iter().fold(Caps::NONE, Caps::union), ident });
            continue;
        }
        elements.push((ident, bounds, default_types(&names)));
    }

    // Instantiation lists (kernels).
    let mut element_params = Vec::new();
    let named_lists: Vec<_> = attrs.types.iter().filter(|l| l.param.is_some()).collect();
    let unnamed: Vec<_> = attrs.types.iter().filter(|l| l.param.is_none()).collect();
    if kind == FnKind::Kernel {
        for list in &named_lists {
            let p = list.param.as_ref().map(|i| i.to_string()).unwrap_or_default();
            if !elements.iter().any(|(i, _, _)| *i == p) {
                cx.error_at(list.span, format!("`{p}` is not an element type parameter of this kernel"));
            }
        }
        if !unnamed.is_empty() && elements.len() != 1 {
            cx.error_at(
                unnamed[0].span,
                if elements.is_empty() {
                    "this kernel has no element type parameter to instantiate: remove `types(…)`".to_string()
                } else {
                    "with several type parameters, name each list: `types(T = [f32, bf16], I = [i32])`".to_string()
                },
            );
        }
    }
    for (ident, bounds, default) in elements {
        let mut instantiate = Vec::new();
        let mut instantiate_spans = Vec::new();
        if kind == FnKind::Kernel {
            let listed = named_lists
                .iter()
                .find(|l| l.param.as_ref() == Some(&ident))
                .or_else(|| unnamed.first().filter(|_| element_params.is_empty()));
            match (listed, default) {
                (Some(list), _) => {
                    for (s, span) in &list.types {
                        if instantiate.contains(s) {
                            cx.error_at(*span, format!("`{}` is listed twice", s.rust()));
                        }
                        instantiate.push(*s);
                        instantiate_spans.push(*span);
                    }
                }
                (None, Some(d)) => {
                    instantiate_spans.extend(d.iter().map(|_| ident.span()));
                    instantiate.extend(d);
                }
                (None, None) => cx.error_spanned_by(
                    &ident,
                    format!(
                        "say which types to instantiate `{ident}` for: `#[kernel(types(f32, bf16))]` (only the \
                         vocabulary's element traits have a default list)"
                    ),
                ),
            }
        }
        element_params.push(ElementParam { ident, bounds, instantiate, instantiate_spans });
    }
    let generic_names = GenericNames {
        elements: element_params.iter().map(|e| e.ident.to_string()).collect(),
        capabilities: capabilities.iter().map(|c| c.ident.to_string()).collect(),
        substitute: Vec::new(),
        coops: element_params
            .iter()
            .filter(|e| {
                e.bounds.iter().any(|b| {
                    matches!(b, TypeParamBound::Trait(t) if t.path.segments.last().is_some_and(|s| s.ident == "Coop"))
                })
            })
            .map(|e| e.ident.to_string())
            .collect(),
    };

    // Parameters.
    let mapper = TypeMapper { generics: &generic_names, cx };
    let position = match kind {
        FnKind::Kernel => Position::KernelParam,
        FnKind::DeviceFn => Position::DeviceFnParam,
    };
    let mut params = Vec::new();
    // A parameter the checks refused is still a name the body may use: typed `Ty::Error`, it draws no more errors.
    let refused = |ident: Ident, rust_ty: Type| Param {
        ident,
        rust_ty,
        cpp_ty: String::new(),
        ty: Ty::Error,
        kind: ParamKind::Other,
    };
    for input in &sig.inputs {
        let pt = match input {
            FnArg::Receiver(r) => {
                cx.error_spanned_by(r, "kernels and device fns are free functions: remove `self`");
                params.push(refused(Ident::from(r.self_token), (*r.ty).clone()));
                continue;
            }
            FnArg::Typed(pt) => pt,
        };
        let ident = match &*pt.pat {
            Pat::Ident(pi) if pi.subpat.is_none() && pi.by_ref.is_none() => pi.ident.clone(),
            other => {
                cx.error_spanned_by(other, "parameters must be plain names (`x: &[f32]`): destructure in the body");
                let mut names = PatIdents::default();
                syn::visit::Visit::visit_pat(&mut names, other);
                params.extend(names.0.into_iter().map(|i| refused(i, (*pt.ty).clone())));
                continue;
            }
        };
        let Some((cpp_ty, ty)) = mapper.map(&pt.ty, position) else {
            params.push(refused(ident, (*pt.ty).clone()));
            continue;
        };
        let before = cx.error_count();
        let kind_of = classify(&pt.ty, &generic_names, &capabilities, cx);
        if kind == FnKind::Kernel && matches!(kind_of, ParamKind::Other) && cx.error_count() == before {
            cx.error_spanned_by(
                &pt.ty,
                "kernel parameters are `&DevComm<C>`, `&Window<T>`, `&[T]`, `&mut [T]`, `LlA2aHandle`, `TmaMatrix<T>`, \
                 `TmaShards<T>` or scalars",
            );
            params.push(refused(ident, (*pt.ty).clone()));
            continue;
        }
        if kind == FnKind::DeviceFn {
            check_session_by_value(&pt.ty, &ty, cx);
        }
        params.push(Param { ident, rust_ty: (*pt.ty).clone(), cpp_ty, ty, kind: kind_of });
    }
    if kind == FnKind::Kernel {
        let devs: Vec<_> = params.iter().filter(|p| matches!(p.kind, ParamKind::DevComm { .. })).collect();
        if devs.len() > 1 {
            cx.error_spanned_by(&devs[1].rust_ty, "a kernel takes at most one `&DevComm<C>`");
        }
    }

    let (ret_cpp, ret_ty) = match &sig.output {
        ReturnType::Default => ("void".to_string(), Ty::Unit),
        ReturnType::Type(_, ty) => {
            if kind == FnKind::Kernel && !matches!(strip_group(ty), Type::Tuple(t) if t.elems.is_empty()) {
                cx.error_spanned_by(
                    ty,
                    "kernels return nothing: write results into a `&mut [T]` parameter or a window",
                );
                ("void".to_string(), Ty::Unit)
            } else {
                mapper.map(ty, Position::Return).unwrap_or(("void".to_string(), Ty::Unknown))
            }
        }
    };

    let complete = cx.error_count() == errors_before;
    (
        Signature { kind, ident: sig.ident.clone(), elements: element_params, params, ret_cpp, ret_ty, generic_names },
        complete,
    )
}

/// The names a (refused) destructuring parameter binds.
#[derive(Default)]
struct PatIdents(Vec<Ident>);

impl<'ast> syn::visit::Visit<'ast> for PatIdents {
    fn visit_pat_ident(&mut self, p: &'ast syn::PatIdent) {
        self.0.push(p.ident.clone());
        syn::visit::visit_pat_ident(self, p);
    }
}

/// A session (`LsaBarrier`, `GinBarrier`, `HybridBarrier`, `LlA2a`) taken by value: Rust moves it, but in C++ it can
/// be neither copied nor moved (it owns NCCL's session state), so the call would not compile.
fn check_session_by_value(rust_ty: &Type, ty: &Ty, cx: &Ctxt) {
    if matches!(strip_group(rust_ty), Type::Reference(_)) {
        return;
    }
    if let Ty::Vocab(v, _) = ty {
        if v.is_session() {
            let name = v.name();
            cx.error_spanned_by(
                rust_ty,
                format!(
                    "a `{name}` session cannot be passed by value: C++ can neither copy nor move it; take it by \
                     reference (`&{name}<'_, Cta>`) and end it in the function that opened it"
                ),
            );
        } else if v.is_pinned() {
            let name = v.name();
            cx.error_spanned_by(
                rust_ty,
                format!("a `{name}` cannot be passed by value ({}): take it by reference (`&{name}…`)", v.why_pinned()),
            );
        }
    }
}

fn type_param_name(ty: &Type) -> Option<Ident> {
    match strip_group(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.get_ident().cloned(),
        _ => None,
    }
}

fn classify(ty: &Type, generics: &GenericNames, caps: &[CapParam], cx: &Ctxt) -> ParamKind {
    let ty = strip_group(ty);
    if let Type::Reference(r) = ty {
        let inner = strip_group(&r.elem);
        if let Type::Slice(s) = inner {
            return ParamKind::Slice { elem: (*s.elem).clone(), mutable: r.mutability.is_some() };
        }
        if let Type::Path(p) = inner {
            if let Some(last) = p.path.segments.last() {
                let first_type_arg = match &last.arguments {
                    syn::PathArguments::AngleBracketed(a) => a.args.iter().find_map(|a| match a {
                        syn::GenericArgument::Type(t) => Some(t.clone()),
                        _ => None,
                    }),
                    _ => None,
                };
                match last.ident.to_string().as_str() {
                    "DevComm" => {
                        let Some(arg) = first_type_arg else {
                            cx.error_spanned_by(ty, "name the capability set: `&DevComm<Lsa>`");
                            return ParamKind::Other;
                        };
                        let name = last_ident(&arg).unwrap_or_default();
                        if let Some(c) = caps.iter().find(|c| c.ident == name) {
                            return ParamKind::DevComm { declared: c.caps, generic: Some(c.ident.clone()) };
                        }
                        return match Caps::from_marker(&name) {
                            Some(declared) => ParamKind::DevComm { declared, generic: None },
                            None => {
                                cx.error_spanned_by(
                                    &arg,
                                    "expected a capability set (`Lsa`, `Gin`, `Multimem`, `LsaGin`, `LsaMultimem`, \
                                     `LsaGinMultimem`) or a type parameter bounded by `HasLsa`/`HasGin`/`HasMultimem`",
                                );
                                ParamKind::Other
                            }
                        };
                    }
                    "Window" => {
                        if let Some(elem) = first_type_arg {
                            return ParamKind::Window { elem };
                        }
                    }
                    _ => {}
                }
            }
        }
        return ParamKind::Other;
    }
    if let Type::Path(p) = ty {
        if let Some(last) = p.path.segments.last() {
            let name = last.ident.to_string();
            if Scalar::from_name(&name).is_some() || generics.elements.contains(&name) {
                return ParamKind::Scalar { rust: ty.clone() };
            }
            if name == "LlA2aHandle" {
                return ParamKind::LlA2aHandle;
            }
            if name == "TmaMatrix" || name == "TmaShards" {
                if let syn::PathArguments::AngleBracketed(a) = &last.arguments {
                    if let Some(syn::GenericArgument::Type(elem)) = a.args.first() {
                        return ParamKind::TmaMatrix { elem: elem.clone(), sharded: name == "TmaShards" };
                    }
                }
            }
        }
    }
    ParamKind::Other
}
