//! The generated `requirements()` and `launch()`: everything the generated code says about the host crate is in
//! this file, so adjusting to `weft_host`'s API is a change here only. docs/macro.md ("What the generated launcher
//! needs from weft-host") lists the items.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use super::ast::{ParamKind, Signature};
use super::attr::{Attributes, LenOperand};
use super::usage::Resource;

/// `requirements(&LaunchConfig) -> Requirements`, from the merged usage constant `__WEFT_USAGE`.
pub(crate) fn requirements(sig: &Signature) -> TokenStream {
    let setters = Resource::ALL.iter().map(|r| {
        let method = format_ident!("{}", r.requirement_method());
        let i = r.index();
        quote!(.#method(__weft_count(#i)))
    });
    let doc = format!(
        " The NCCL device-communicator resources `{}` needs when launched with `cfg`: LSA barriers, GIN signals, \
         counters and barriers, from the indices its body (and the device fns it calls) use.",
        sig.ident
    );
    quote! {
        #[doc = #doc]
        pub fn requirements(cfg: &::weft::host::LaunchConfig) -> ::weft::host::Requirements {
            let __weft_grid: [u32; 3] = [cfg.grid_dim.0, cfg.grid_dim.1, cfg.grid_dim.2];
            let __weft_count = |resource: usize| -> u32 {
                let mut count = __WEFT_USAGE[2 + 2 * resource];
                let axes = __WEFT_USAGE[3 + 2 * resource];
                let mut axis = 0;
                while axis < 3 {
                    if axes & (1 << axis) != 0 && __weft_grid[axis] > count {
                        count = __weft_grid[axis];
                    }
                    axis += 1;
                }
                count
            };
            ::weft::host::Requirements::new()
                #(#setters)*
                .lsa_multimem(CAPABILITIES.multimem)
        }
    }
}

/// `launch(stream, cfg, <the kernel's parameters>)`.
pub(crate) fn launch(sig: &Signature, attrs: &Attributes) -> TokenStream {
    let used: Vec<String> = sig.params.iter().map(|p| p.ident.to_string()).collect();
    let pick = |preferred: &str, fallback: &str| {
        Ident::new(if used.iter().any(|u| u == preferred) { fallback } else { preferred }, Span::call_site())
    };
    let stream = pick("stream", "launch_stream");
    let cfg = pick("cfg", "launch_cfg");

    // Generic parameters: element types (the user's bounds + Element), the capability set of the DevComm.
    let mut generics = Vec::new();
    for e in &sig.elements {
        let ident = &e.ident;
        let bounds = &e.bounds;
        if bounds.is_empty() {
            generics.push(quote!(#ident: ::weft::device::Element));
        } else {
            generics.push(quote!(#ident: #(#bounds)+* + ::weft::device::Element));
        }
    }
    let mut params = Vec::new();
    let mut pushes = Vec::new();
    for p in &sig.params {
        let ident = &p.ident;
        let name = ident.to_string();
        let len = format_ident!("__weft_len_{}", ident);
        match &p.kind {
            ParamKind::DevComm { declared, generic } => {
                let c = generic.clone().unwrap_or_else(|| Ident::new("__WeftCaps", Span::call_site()));
                let bounds: Vec<TokenStream> = declared
                    .bounds()
                    .into_iter()
                    .map(|b| {
                        let b = Ident::new(b, Span::call_site());
                        quote!(::weft::device::caps::#b)
                    })
                    .collect();
                if bounds.is_empty() {
                    generics.push(quote!(#c: ::weft::device::caps::CapabilitySet));
                } else {
                    generics.push(quote!(#c: #(#bounds)+*));
                }
                params.push(quote!(#ident: &::weft::host::DevComm<'_, #c>));
                pushes.push(quote! {
                    #ident.check_requirements(NAME, &#cfg, &requirements(&#cfg))?;
                    __weft_args.push_dev_comm(#name, #ident)?;
                });
            }
            ParamKind::Window { elem } => {
                params.push(quote!(#ident: &impl ::weft::host::launch::KernelWindow<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_window(#name, #ident)?;));
            }
            ParamKind::Slice { elem, mutable: false } => {
                params.push(quote!(#ident: &impl ::weft::host::launch::KernelSlice<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_slice(#name, #ident)?;));
            }
            ParamKind::Slice { elem, mutable: true } => {
                params.push(quote!(#ident: &mut impl ::weft::host::launch::KernelSliceMut<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_slice_mut(#name, #ident)?;));
            }
            ParamKind::Scalar { rust } => {
                params.push(quote!(#ident: #rust));
                pushes.push(quote!(__weft_args.push_scalar(#name, #ident);));
            }
            ParamKind::LlA2aHandle { rust } => {
                params.push(quote!(#ident: #rust));
                pushes.push(quote!(__weft_args.push_ll_a2a_handle(#name, #ident);));
            }
            ParamKind::Other => {}
        }
    }

    let checks = attrs.len_checks.iter().map(|check| {
        let operand = |o: &LenOperand| match o {
            LenOperand::Literal(v) => quote!((#v as u64)),
            LenOperand::Param(ident) => match sig.params.iter().find(|p| p.ident == *ident).map(|p| &p.kind) {
                Some(ParamKind::Window { .. } | ParamKind::Slice { .. }) => {
                    let len = format_ident!("__weft_len_{}", ident);
                    quote!((#len as u64))
                }
                _ => quote!((#ident as u64)),
            },
        };
        let (lhs, rhs, op) = (operand(&check.lhs), operand(&check.rhs), &check.op);
        let text = check.tokens.to_string();
        let values: Vec<TokenStream> = [&check.lhs, &check.rhs]
            .iter()
            .filter_map(|o| match o {
                LenOperand::Param(ident) => {
                    let n = ident.to_string();
                    let v = operand(o);
                    Some(quote!((#n, #v)))
                }
                LenOperand::Literal(_) => None,
            })
            .collect();
        quote! {
            if !(#lhs #op #rhs) {
                return ::core::result::Result::Err(::weft::host::launch::length_check_failed(NAME, #text, &[#(#values),*]));
            }
        }
    });

    let entry = if sig.elements.is_empty() {
        quote!(ENTRY_POINTS[0])
    } else {
        let names = sig.elements.iter().map(|e| {
            let i = &e.ident;
            quote!(<#i as ::weft::device::Element>::NAME)
        });
        quote!(const { __weft_entry_point(&[#(#names),*]) })
    };
    let doc = format!(
        " Compiles `{}` for the stream's GPU (once per process; cubins are cached on disk), checks what the types \
         cannot (the grid against the communicator's resources, buffers on the stream's device, declared lengths) \
         and launches it on `{stream}`.",
        sig.ident
    );
    quote! {
        #[doc = #doc]
        #[allow(clippy::too_many_arguments)]
        pub fn launch<#(#generics),*>(
            #stream: &::std::sync::Arc<::weft::host::launch::CudaStream>,
            #cfg: ::weft::host::LaunchConfig,
            #(#params),*
        ) -> ::core::result::Result<(), ::weft::host::Error> {
            let __weft_entry: &'static str = #entry;
            let mut __weft_args = ::weft::host::launch::ArgBuffer::new(NAME, #stream);
            #(#pushes)*
            #(#checks)*
            __weft_args.launch(
                &::weft::host::jit::KernelSpec { name: NAME, source: __WEFT_SOURCE_STATIC, entry_point: __weft_entry },
                #cfg,
            )
        }
    }
}
