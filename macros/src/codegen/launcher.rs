//! The generated `requirements()` and `launch()`. Everything the generated code says about `weft-host` is in this
//! file, so following a change of the host's API is a change here only; docs/macro.md ("What the generated code
//! needs") lists the items.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::Ident;

use super::ast::{ParamKind, Signature};
use super::attr::{Attributes, LenOperand};
use super::usage::Resource;

/// Host paths, in one place.
mod host {
    use proc_macro2::TokenStream;
    use quote::quote;

    pub(super) fn launch_config() -> TokenStream {
        quote!(::weft::host::LaunchConfig)
    }
    pub(super) fn requirements() -> TokenStream {
        quote!(::weft::host::Requirements)
    }
    pub(super) fn error() -> TokenStream {
        quote!(::weft::host::Error)
    }
    pub(super) fn stream() -> TokenStream {
        quote!(::weft::host::launch::CudaStream)
    }
    pub(super) fn dev_comm() -> TokenStream {
        quote!(::weft::host::DevComm)
    }
    pub(super) fn mode() -> TokenStream {
        quote!(::weft::host::Mode)
    }
    pub(super) fn kernel_window() -> TokenStream {
        quote!(::weft::host::launch::KernelWindow)
    }
    pub(super) fn kernel_slice() -> TokenStream {
        quote!(::weft::host::launch::KernelSlice)
    }
    pub(super) fn kernel_slice_mut() -> TokenStream {
        quote!(::weft::host::launch::KernelSliceMut)
    }
    pub(super) fn kernel_args() -> TokenStream {
        quote!(::weft::host::launch::KernelArgs)
    }
    pub(super) fn length_check_failed() -> TokenStream {
        quote!(::weft::host::launch::length_check_failed)
    }
    pub(super) fn kernel_spec() -> TokenStream {
        quote!(::weft::host::jit::KernelSpec)
    }
    pub(super) fn bounds_checks() -> TokenStream {
        quote!(::weft::host::jit::BoundsChecks)
    }
    pub(super) fn caps(name: &str) -> TokenStream {
        let ident = proc_macro2::Ident::new(name, proc_macro2::Span::call_site());
        quote!(::weft::device::caps::#ident)
    }
    pub(super) fn element() -> TokenStream {
        quote!(::weft::device::Element)
    }
    pub(super) fn host_element() -> TokenStream {
        quote!(::weft::host::Element)
    }
}

/// `requirements(&LaunchConfig) -> Requirements`, from the merged usage constant `__WEFT_USAGE`.
pub(crate) fn requirements(sig: &Signature) -> TokenStream {
    let setters = Resource::ALL.iter().filter(|r| !matches!(r, Resource::LlA2aBlock | Resource::LlA2aSlot)).map(|r| {
        let method = format_ident!("{}", r.requirement_method());
        let i = r.index();
        quote!(.#method(__weft_count(#i)))
    });
    let (blocks, slots) = (Resource::LlA2aBlock.index(), Resource::LlA2aSlot.index());
    let doc = format!(
        " The NCCL device-communicator resources `{}` needs when launched with `cfg`: barriers, GIN signals, \
         counters and contexts, from the indices its body (and the device fns it calls) use, and multimem if it \
         uses it. Create the `DevComm` with (at least) these.",
        sig.ident
    );
    let (config, requirements) = (host::launch_config(), host::requirements());
    quote! {
        #[doc = #doc]
        pub fn requirements(cfg: &#config) -> #requirements {
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
            let __weft_requirements = #requirements::new() #(#setters)*.lsa_multimem(CAPABILITIES.multimem);
            let (__weft_blocks, __weft_slots) = (__weft_count(#blocks), __weft_count(#slots));
            if __weft_blocks > 0 || __weft_slots > 0 {
                __weft_requirements.ll_a2a(__weft_blocks, __weft_slots)
            } else {
                __weft_requirements
            }
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
    let mode = Ident::new("__WeftMode", Span::call_site());
    let element = host::element();

    // Generic parameters: element types (the user's bounds + Element), the capability set and NCCL mode.
    let mut generics = Vec::new();
    for e in &sig.elements {
        let ident = &e.ident;
        let mut bounds: Vec<TokenStream> = e.bounds.iter().map(|b| quote!(#b)).collect();
        bounds.push(element.clone());
        // A scalar parameter of this type is pushed by value: the host needs its `DeviceRepr`, which its
        // `Element` (NCCL's data types) provides.
        let by_value = sig.params.iter().any(|p| match &p.kind {
            ParamKind::Scalar { rust } => super::types::last_ident(rust).is_some_and(|n| e.ident == n),
            _ => false,
        });
        if by_value {
            bounds.push(host::host_element());
        }
        generics.push(quote!(#ident: #(#bounds)+*));
    }
    let mut params = Vec::new();
    let mut checks = Vec::new();
    let mut pushes = Vec::new();
    for p in &sig.params {
        let ident = &p.ident;
        let name = ident.to_string();
        let len = format_ident!("__weft_len_{}", ident);
        match &p.kind {
            ParamKind::DevComm { declared, generic } => {
                let c = generic.clone().unwrap_or_else(|| Ident::new("__WeftCaps", Span::call_site()));
                let bounds: Vec<TokenStream> = declared.bounds().into_iter().map(host::caps).collect();
                let bounds = if bounds.is_empty() { vec![host::caps("CapabilitySet")] } else { bounds };
                let (dev_comm, m) = (host::dev_comm(), host::mode());
                generics.push(quote!(#c: #(#bounds)+*));
                generics.push(quote!(#mode: #m));
                params.push(quote!(#ident: &#dev_comm<'_, #c, #mode>));
                // The grid against the communicator's resources.
                checks.push(quote!(#ident.check_requirements(NAME, &#cfg, &requirements(&#cfg))?;));
                pushes.push(quote!(__weft_args.push_dev_comm(#name, #ident)?;));
            }
            ParamKind::Window { elem } => {
                let window = host::kernel_window();
                params.push(quote!(#ident: &impl #window<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_window(#name, #ident)?;));
            }
            ParamKind::Slice { elem, mutable: false } => {
                let slice = host::kernel_slice();
                params.push(quote!(#ident: &impl #slice<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_slice(#name, #ident)?;));
            }
            ParamKind::Slice { elem, mutable: true } => {
                let slice = host::kernel_slice_mut();
                params.push(quote!(#ident: &mut impl #slice<#elem>));
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

    let length_check_failed = host::length_check_failed();
    let len_checks = attrs.len_checks.iter().map(|check| {
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
        let rule = check.tokens.to_string();
        let values = [&check.lhs, &check.rhs].into_iter().filter_map(|o| match o {
            LenOperand::Param(ident) => {
                let n = ident.to_string();
                let v = operand(o);
                Some(quote!((#n, #v)))
            }
            LenOperand::Literal(_) => None,
        });
        quote! {
            if !(#lhs #op #rhs) {
                return ::core::result::Result::Err(#length_check_failed(NAME, #rule, &[#(#values),*]));
            }
        }
    });

    let entry = if sig.elements.is_empty() {
        quote!(ENTRY_POINTS[0])
    } else {
        let names = sig.elements.iter().map(|e| {
            let i = &e.ident;
            quote!(<#i as #element>::NAME)
        });
        quote!(const { __weft_entry_point(&[#(#names),*]) })
    };
    let doc = format!(
        " Compiles `{}` for the stream's GPU (once per process; cubins are cached on disk), checks what the types \
         cannot (the grid against the communicator's resources, buffers on the stream's device, declared lengths) \
         and launches it on `{stream}`.",
        sig.ident
    );
    let (stream_ty, config, error) = (host::stream(), host::launch_config(), host::error());
    let (kernel_args, kernel_spec, bounds_checks) = (host::kernel_args(), host::kernel_spec(), host::bounds_checks());
    let names: Vec<String> =
        sig.params.iter().filter(|p| !matches!(p.kind, ParamKind::Other)).map(|p| p.ident.to_string()).collect();
    quote! {
        #[doc = #doc]
        #[allow(clippy::too_many_arguments)]
        pub fn launch<#(#generics),*>(
            #stream: &::std::sync::Arc<#stream_ty>,
            #cfg: #config,
            #(#params),*
        ) -> ::core::result::Result<(), #error> {
            let __weft_entry: &'static str = #entry;
            #(#checks)*
            let mut __weft_args = #kernel_args::with_parameters(NAME, &[#(#names),*], #stream);
            #(#pushes)*
            #(#len_checks)*
            let __weft_spec = #kernel_spec { name: NAME, source: __WEFT_SOURCE_STATIC, entry_point: __weft_entry };
            // SAFETY (the macro's, not the caller's): the source is this kernel's, generated by the macro with
            // `__weft_entry` among its entry points, and the arguments were pushed above for every parameter, in
            // order, each by its kind.
            unsafe { __weft_args.launch(&__weft_spec, #cfg, #bounds_checks::Off) }
        }
    }
}
