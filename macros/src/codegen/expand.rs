//! The Rust the macros expand to: the user's function (kept for rustc's type checking) and, next to it, a module of
//! the same name (modules and functions live in different namespaces) holding the generated constants.
//!
//! A device fn's module holds its C++ (`__WEFT_SOURCE`, which already includes the device fns it calls) and its
//! usage; a kernel's module joins `header + callees + kernel` into `SOURCE` at compile time with `const fn`s, so a
//! kernel sees the device fns it calls through ordinary Rust paths.

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use super::ast::Signature;
use super::attr::Attributes;
use super::launcher;
use super::uniform::{DivergentCall, Level};
use super::usage::{Usage, BLOCK_COLLECTIVE_BIT, USAGE_WORDS, WARP_COLLECTIVE_BIT};

/// The user's function, unchanged but for `#[allow(dead_code)]`: rustc type-checks it against `weft-device`.
pub(crate) fn user_fn(item: &ItemFn) -> TokenStream {
    quote! {
        #[allow(dead_code)]
        #item
    }
}

/// Rewrites a call path as written in the function's module into the same path written one module deeper (inside
/// the generated module): `self::x` → `super::x`, `super::x` → `super::super::x`.
fn companion_path(path: &syn::Path) -> TokenStream {
    let mut segments: Vec<TokenStream> = Vec::new();
    let first = path.segments.first().map(|s| s.ident.to_string()).unwrap_or_default();
    let mut iter = path.segments.iter().peekable();
    if path.leading_colon.is_none() {
        if first == "self" {
            iter.next();
            segments.push(quote!(super));
        } else if first == "super" {
            segments.push(quote!(super));
        }
    }
    for s in iter {
        let ident = &s.ident;
        segments.push(quote!(#ident));
    }
    let colon = path.leading_colon.map(|_| quote!(::));
    quote!(#colon #(#segments)::*)
}

/// What a generated module says about the free functions its body calls.
struct Callees {
    /// `use path as alias;` per callee.
    imports: Vec<TokenStream>,
    /// The callee's C++ (`alias::__WEFT_DEVICE_FN.source()`), spanned at the call.
    sources: Vec<TokenStream>,
    /// The callee's usage words, spanned at the call.
    usages: Vec<TokenStream>,
    /// Per callee, that its companion belongs to a function of its name (a constant assertion, spanned at the call).
    name_checks: Vec<TokenStream>,
}

/// Each called free function imported under an alias that says what it must be, and its companion's token
/// (`::weft::__private::DeviceFn`, which only `#[device_fn]`'s expansion can make: see `src/private.rs`) through
/// the alias, spanned at the call: calling a plain Rust function from a kernel then fails at the call with rustc's
/// "function `double_must_be_a_weft_device_fn` is not a crate or module", and calling a kernel with "cannot find
/// value `__WEFT_DEVICE_FN` in module `fill_must_be_a_weft_device_fn`". A token copied from another device fn's
/// companion fails the name check.
///
/// A callee called under control flow that not every thread takes (`divergent`, from `uniform`) must have no
/// collective that needs them: a constant assertion on its usage words, spanned at the call.
fn callee_aliases(calls: &[syn::Path], divergent: &[DivergentCall]) -> Callees {
    let mut out = Callees { imports: Vec::new(), sources: Vec::new(), usages: Vec::new(), name_checks: Vec::new() };
    let mut seen: Vec<String> = Vec::new();
    for (i, path) in calls.iter().enumerate() {
        let target = companion_path(path);
        let last = path.segments.last().map(|s| s.ident.clone());
        let span = last.as_ref().map(|i| i.span()).unwrap_or_else(proc_macro2::Span::call_site);
        let name = last.map(|i| syn::ext::IdentExt::unraw(&i).to_string()).unwrap_or_default();
        // Two callees with one name in different modules (`a::helper`, `b::helper`) need two aliases.
        let mut alias = format!("{name}_must_be_a_weft_device_fn");
        if seen.contains(&alias) {
            alias = format!("{alias}_{i}");
        }
        seen.push(alias.clone());
        let alias = syn::Ident::new(&alias, span);
        let token = quote::quote_spanned!(span=> #alias::__WEFT_DEVICE_FN);
        out.imports.push(quote!(use #target as #alias;));
        out.sources.push(quote::quote_spanned!(span=> #token.source()));
        out.usages.push(quote::quote_spanned!(span=> #token.usage()));
        let message = format!(
            "weft: the companion module of `{name}` holds the C++ of another device fn: call the #[weft::device_fn] \
             itself"
        );
        out.name_checks.push(quote::quote_spanned!(span=>
            const _: () = ::core::assert!(::weft::__private::str_eq(#token.name(), #name), #message);
        ));
        let key = {
            let path = path.clone();
            quote!(#path).to_string()
        };
        if let Some(call) = divergent.iter().find(|d| d.key == key) {
            let span = call.span;
            let checks: &[(u32, &str)] = match call.level {
                Level::Block => &[],
                Level::Warp => &[(BLOCK_COLLECTIVE_BIT, "block")],
                Level::Thread => &[(BLOCK_COLLECTIVE_BIT, "block"), (WARP_COLLECTIVE_BIT, "warp")],
            };
            for (bit, noun) in checks {
                let message = format!(
                    "weft: the device fn `{name}` has a {noun}-wide collective (a barrier or a session of a coop, \
                     `sync_threads()`, a shuffle, …), which needs every thread of the {noun}, but not every thread of \
                     the {noun} makes this call: {}. Call it where every thread of the {noun} does (docs/macro.md, \
                     \"Collectives\")",
                    call.cause
                );
                out.name_checks.push(quote::quote_spanned!(span=>
                    const _: () = ::core::assert!(#token.usage()[1] & #bit == 0, #message);
                ));
            }
        }
    }
    out
}

fn const_helpers() -> TokenStream {
    let words = USAGE_WORDS;
    quote! {
        const fn __weft_concat_len(parts: &[&str]) -> usize {
            let mut n = 0;
            let mut i = 0;
            while i < parts.len() {
                n += parts[i].len();
                i += 1;
            }
            n
        }
        const fn __weft_concat<const N: usize>(parts: &[&str]) -> [u8; N] {
            let mut out = [0u8; N];
            let mut o = 0;
            let mut i = 0;
            while i < parts.len() {
                let p = parts[i].as_bytes();
                let mut j = 0;
                while j < p.len() {
                    out[o] = p[j];
                    o += 1;
                    j += 1;
                }
                i += 1;
            }
            out
        }
        /// Usage words: format, capability bits, then (count, grid axes) per resource; empty for vocabulary.
        const fn __weft_merge_usage(parts: &[&[u32]]) -> [u32; #words] {
            let mut out = [0u32; #words];
            out[0] = 1;
            let mut i = 0;
            while i < parts.len() {
                let p = parts[i];
                if p.len() == #words {
                    out[1] |= p[1];
                    let mut k = 2;
                    while k < #words {
                        if k % 2 == 0 {
                            if p[k] > out[k] {
                                out[k] = p[k];
                            }
                        } else {
                            out[k] |= p[k];
                        }
                        k += 1;
                    }
                }
                i += 1;
            }
            out
        }
        const __WEFT_LEN: usize = __weft_concat_len(__WEFT_PARTS);
        const __WEFT_SOURCE_BYTES: [u8; __WEFT_LEN] = __weft_concat::<__WEFT_LEN>(__WEFT_PARTS);
    }
}

fn usage_tokens(usage: &Usage) -> TokenStream {
    let words = usage.encode();
    quote!(&[#(#words),*])
}

/// The module next to a `#[device_fn]`.
pub(crate) fn device_fn_module(
    item: &ItemFn,
    own_source: &str,
    usage: &Usage,
    calls: &[syn::Path],
    divergent: &[DivergentCall],
) -> TokenStream {
    let vis = &item.vis;
    let name = &item.sig.ident;
    let Callees { imports: callee_imports, sources: callee_sources, usages: callee_usages, name_checks } =
        callee_aliases(calls, divergent);
    let own_usage = usage_tokens(usage);
    let helpers = const_helpers();
    let doc = format!(" The C++ of the device fn [`{name}`](fn@{name}) for the kernels that call it (generated).");
    let name_str = syn::ext::IdentExt::unraw(name).to_string();
    quote! {
        #[doc = #doc]
        #[doc(hidden)]
        #[allow(non_snake_case, dead_code, unused_imports, clippy::all)]
        #vis mod #name {
            use super::*;
            #(#callee_imports)*
            const __WEFT_OWN: &str = #own_source;
            const __WEFT_PARTS: &[&str] = &[#(#callee_sources,)* __WEFT_OWN];
            #helpers
            #(#name_checks)*
            /// This device fn's C++ definition, after those of the device fns it calls.
            const __WEFT_SOURCE: &str = match ::core::str::from_utf8(&__WEFT_SOURCE_BYTES) {
                ::core::result::Result::Ok(s) => s,
                ::core::result::Result::Err(_) => ::core::panic!("weft: generated C++ is not UTF-8"),
            };
            /// Capabilities, resources and collectives the device fn (and its callees) use.
            const __WEFT_USAGE: &[u32] = &__weft_merge_usage(&[#own_usage #(, #callee_usages)*]);
            /// What kernels calling the device fn take from here.
            pub const __WEFT_DEVICE_FN: ::weft::__private::DeviceFn =
                // SAFETY (the macro's): the source and usage above are what this expansion generated for the
                // function and the device fns it calls (each taken from that callee's own token).
                unsafe { ::weft::__private::DeviceFn::new(#name_str, __WEFT_SOURCE, __WEFT_USAGE) };
        }
    }
}

/// Every instantiation satisfies the element parameters' bounds, checked by rustc (so `cargo check` and IDEs show
/// it): a type in `#[kernel(types(…))]` that the bounds do not admit (`types(f32, u32)` for `T: Float`) would get a C++
/// entry point whose body does not compile, which fails the whole module at its first launch. The error names the
/// type, spanned where it is listed.
fn instantiable_check(sig: &Signature) -> TokenStream {
    let element = quote!(::weft::device::Element);
    let params = sig.elements.iter().map(|e| {
        let ident = &e.ident;
        let bounds = e.bounds.iter().map(|b| quote!(#b + ));
        quote!(#ident: #(#bounds)* #element)
    });
    // One call per instantiation; each type spanned where it was written.
    let mut calls = Vec::new();
    for types in spanned_instantiations(sig) {
        calls.push(quote!(__weft_instantiable::<#(#types),*>();));
    }
    quote! {
        const _: () = {
            fn __weft_instantiable<#(#params),*>() {}
            fn __weft_every_instantiation_is_admitted() {
                #(#calls)*
            }
        };
    }
}

/// `Signature::instantiations` as Rust types, each spanned where it was written in `types(…)`.
fn spanned_instantiations(sig: &Signature) -> Vec<Vec<TokenStream>> {
    let mut combos: Vec<Vec<TokenStream>> = vec![Vec::new()];
    for e in &sig.elements {
        let mut next = Vec::new();
        for prefix in &combos {
            for (s, span) in e.instantiate.iter().zip(&e.instantiate_spans) {
                let mut c = prefix.clone();
                c.push(scalar_tokens(*s, *span));
                next.push(c);
            }
        }
        combos = next;
    }
    combos
}

/// The Rust type of an element scalar, spanned at `span` (`f16`/`bf16` through the facade, which re-exports them).
fn scalar_tokens(s: super::types::Scalar, span: proc_macro2::Span) -> TokenStream {
    let ident = syn::Ident::new(s.rust(), span);
    match s {
        super::types::Scalar::F16 | super::types::Scalar::Bf16 => quote::quote_spanned!(span=> ::weft::device::#ident),
        _ => quote!(#ident),
    }
}

/// `Instantiated`: the sealed trait the kernel's element types implement, one impl per instantiation, each giving its
/// entry point. `launch` and the other generic items are bounded by it, so a type the kernel is not instantiated for
/// is a trait error at the call (`cargo check` and IDEs show it, naming the type), and generic host code states the
/// bound it needs (`T: scale::Instantiated`). A kernel with several element parameters implements it for the tuple.
fn instantiated_trait(sig: &Signature, name_str: &str) -> TokenStream {
    let bounds_check = instantiable_check(sig);
    let instantiations = sig.instantiations();
    let listed: Vec<String> = instantiations
        .iter()
        .map(|t| format!("({})", t.iter().map(|s| s.rust()).collect::<Vec<_>>().join(", ")))
        .collect();
    let listed = listed.join(", ");
    let several = sig.elements.len() > 1;
    let bound = super::launcher::instantiated_bound(sig);
    let message = format!("weft: kernel `{name_str}` has no entry point for the element type(s) `{{Self}}`");
    let label = format!("`{name_str}` is not instantiated for this");
    let note = format!(
        "add the type(s) to #[kernel(types(...))] (`{name_str}` is instantiated for {listed}); generic host code that \
         launches it bounds its type parameter(s): `{bound}: {name_str}::Instantiated`"
    );
    let doc = format!(
        " The element types `{name_str}` is instantiated for ({listed}, from `#[kernel(types(…))]`), each with its entry \
         point: `launch` and the other generic items here require it, so generic host code that launches `{name_str}` \
         states `{bound}: {name_str}::Instantiated`. Sealed."
    );
    // One impl per instantiation; each type spanned where it was written.
    let impls = spanned_instantiations(sig).into_iter().zip(&instantiations).map(|(types, scalars)| {
        let entry = sig.entry_point(scalars);
        let ty = if several { quote!((#(#types),*)) } else { quote!(#(#types)*) };
        quote! {
            impl __weft_sealed::Sealed for #ty {}
            impl Instantiated for #ty {
                const ENTRY_POINT: &'static str = #entry;
            }
        }
    });
    quote! {
        #bounds_check
        mod __weft_sealed {
            pub trait Sealed {}
        }
        #[doc = #doc]
        #[diagnostic::on_unimplemented(message = #message, label = #label, note = #note)]
        pub trait Instantiated: __weft_sealed::Sealed {
            /// The `extern "C"` entry point of this instantiation.
            const ENTRY_POINT: &'static str;
        }
        #(#impls)*
    }
}

/// The module next to a `#[kernel]`: docs/kernel-abi.md's "Generated module".
#[allow(clippy::too_many_arguments)]
pub(crate) fn kernel_module(
    item: &ItemFn,
    sig: &Signature,
    attrs: &Attributes,
    header: &str,
    kernel_source: &str,
    usage: &Usage,
    lowered: &super::lower::LoweredBody,
    calls: &[syn::Path],
    divergent: &[DivergentCall],
) -> TokenStream {
    let vis = &item.vis;
    let name = &item.sig.ident;
    let name_str = name.to_string();
    let Callees { imports: callee_imports, sources: callee_sources, usages: callee_usages, name_checks } =
        callee_aliases(calls, divergent);
    let own_usage = usage_tokens(usage);
    let helpers = const_helpers();
    let instantiations = sig.instantiations();
    let entry_points: Vec<String> = instantiations.iter().map(|t| sig.entry_point(t)).collect();
    let entry_lookup = if sig.elements.is_empty() { quote!() } else { instantiated_trait(sig, &name_str) };
    let requirements = launcher::requirements(sig);
    let launch = launcher::launch(sig, attrs, &lowered.bounds, &lowered.resource_checks);
    let api = super::module_api::items(sig);
    let doc = format!(
        " The generated side of the kernel [`{name_str}`](fn@{name_str}): its CUDA C++, entry points, capabilities, \
         NCCL requirements and typed launcher."
    );
    quote! {
        #[doc = #doc]
        #[allow(non_snake_case, dead_code, unused_imports, clippy::all)]
        #vis mod #name {
            use super::*;
            #(#callee_imports)*
            /// The kernel's name.
            pub const NAME: &str = #name_str;
            const __WEFT_PARTS: &[&str] = &[#header, #(#callee_sources,)* #kernel_source];
            #helpers
            #(#name_checks)*
            /// The complete CUDA C++ translation unit (it includes `weft.cuh`).
            pub const SOURCE: &str = match ::core::str::from_utf8(&__WEFT_SOURCE_BYTES) {
                ::core::result::Result::Ok(s) => s,
                ::core::result::Result::Err(_) => ::core::panic!("weft: generated C++ is not UTF-8"),
            };
            /// One address for the source, so the host's module registry sees one kernel.
            static __WEFT_SOURCE_STATIC: &str = SOURCE;
            /// The `extern "C"` entry points, one per instantiated element-type list.
            pub const ENTRY_POINTS: &[&str] = &[#(#entry_points),*];
            #[doc(hidden)]
            pub const __WEFT_USAGE: &[u32] = &__weft_merge_usage(&[#own_usage #(, #callee_usages)*]);
            /// The capabilities the kernel uses: declared by its `DevComm<C>` and inferred from its body and the
            /// device fns it calls.
            pub const CAPABILITIES: ::weft::device::caps::Capabilities = ::weft::device::caps::Capabilities {
                lsa: __WEFT_USAGE[1] & 1 != 0,
                gin: __WEFT_USAGE[1] & 2 != 0,
                multimem: __WEFT_USAGE[1] & 4 != 0,
            };
            #entry_lookup
            #requirements
            #launch
            #api
        }
    }
}
