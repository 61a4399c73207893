//! The generated `requirements()`, `launch()` and `launch_unchecked()`. Everything the generated code says about
//! `weft-host` is in this file (`launch_checks` writes the checks with the paths of [`host`]), so following a change
//! of the host's API is a change here only; docs/macro.md ("What the generated code needs") lists the items.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};
use syn::{Ident, Lifetime};

use super::ast::{ParamKind, Signature};
use super::attr::Attributes;
use super::bounds::{Bounds, Site};
use super::usage::{Resource, BLOCK_OF_256_BIT, DEVICE_CHECKS_BIT, GEMM_TILES_BIT, WARP_COLLECTIVE_BIT};

/// Host paths, in one place.
pub(crate) mod host {
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
    pub(super) fn tma_operand() -> TokenStream {
        quote!(::weft::host::launch::TmaOperand)
    }
    pub(super) fn tma_shards() -> TokenStream {
        quote!(::weft::host::launch::TmaShards)
    }
    pub(super) fn ll_a2a_handle() -> TokenStream {
        quote!(::weft::host::devcomm::LlA2aHandle)
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
    pub(super) fn capture() -> TokenStream {
        quote!(::weft::host::graph::Capture)
    }
    pub(super) fn graph_buffer() -> TokenStream {
        quote!(::weft::host::graph::GraphBuffer)
    }
    pub(crate) fn length_check_failed() -> TokenStream {
        quote!(::weft::host::launch::length_check_failed)
    }
    pub(super) fn kernel_spec() -> TokenStream {
        quote!(::weft::host::jit::KernelSpec)
    }
    pub(super) fn bounds_checks() -> TokenStream {
        quote!(::weft::host::jit::BoundsChecks)
    }
    pub(crate) fn bounds() -> TokenStream {
        quote!(::weft::host::launch::bounds)
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

/// The element parameters as one type: `T`, or the tuple `(T, U)` for several (what `Instantiated` is implemented
/// for), as written in the bound's note.
pub(crate) fn instantiated_bound(sig: &Signature) -> String {
    let names: Vec<String> = sig.elements.iter().map(|e| e.ident.to_string()).collect();
    if names.len() == 1 {
        names[0].clone()
    } else {
        format!("({})", names.join(", "))
    }
}

/// The entry point's expression and the `where` clause of the generated generic items: a kernel with element
/// parameters takes its entry point from their `Instantiated` impl (expand.rs), so a type it is not instantiated for
/// is a trait error at the call.
pub(crate) fn instantiated(sig: &Signature) -> (TokenStream, TokenStream) {
    if sig.elements.is_empty() {
        return (quote!(ENTRY_POINTS[0]), TokenStream::new());
    }
    let idents: Vec<&Ident> = sig.elements.iter().map(|e| &e.ident).collect();
    let bounded = if idents.len() == 1 { quote!(#(#idents)*) } else { quote!((#(#idents),*)) };
    (quote!(<#bounded as Instantiated>::ENTRY_POINT), quote!(where #bounded: Instantiated))
}

/// `launch(stream, cfg, <the kernel's parameters>)` and `launch_unchecked(…)`, the same but `unsafe`: no bound
/// checked before launching nor on the device.
pub(crate) fn launch(
    sig: &Signature,
    attrs: &Attributes,
    bounds: &Bounds,
    resource_checks: &[super::lower::ResourceCheck],
) -> TokenStream {
    let used: Vec<String> = sig.params.iter().map(|p| p.ident.to_string()).collect();
    let pick = |preferred: &str, fallback: &str| {
        Ident::new(if used.iter().any(|u| u == preferred) { fallback } else { preferred }, Span::call_site())
    };
    let stream = pick("stream", "launch_stream");
    let capture = pick("capture", "launch_capture");
    let cfg = pick("cfg", "launch_cfg");
    let graph = Lifetime::new("'__weft_graph", Span::call_site());
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
        // A `TmaMatrix<T>` parameter's map is encoded for `T` on the host.
        let through_tma = sig.params.iter().any(|p| match &p.kind {
            ParamKind::TmaMatrix { elem, .. } => super::types::last_ident(elem).is_some_and(|n| e.ident == n),
            _ => false,
        });
        if through_tma {
            bounds.push(quote!(::weft::host::launch::TmaElement));
        }
        generics.push(quote!(#ident: #(#bounds)+*));
    }
    let mut params = Vec::new();
    let mut checks = Vec::new();
    let mut pushes = Vec::new();
    // `record`'s: everything borrowed for the graph's life, slices as weft graph buffers (crate::graph).
    let mut record_params = Vec::new();
    let mut record_pushes = Vec::new();
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
                record_params.push(quote!(#ident: &#graph #dev_comm<'_, #c, #mode>));
                // The grid against the communicator's resources.
                checks.push(quote!(#ident.check_requirements(NAME, &#cfg, &requirements(&#cfg))?;));
                pushes.push(quote!(__weft_args.push_dev_comm(#name, #ident)?;));
                record_pushes.push(quote!(__weft_args.push_dev_comm(#name, #ident)?;));
            }
            ParamKind::Window { elem } => {
                let window = host::kernel_window();
                params.push(quote!(#ident: &impl #window<#elem>));
                record_params.push(quote!(#ident: &#graph impl #window<#elem>));
                pushes.push(quote!(let #len: usize = __weft_args.push_window(#name, #ident)?;));
                record_pushes.push(quote!(let #len: usize = __weft_args.push_window(#name, #ident)?;));
            }
            ParamKind::Slice { elem, mutable } => {
                if *mutable {
                    let slice = host::kernel_slice_mut();
                    params.push(quote!(#ident: &mut impl #slice<#elem>));
                    pushes.push(quote!(let #len: usize = __weft_args.push_slice_mut(#name, #ident)?;));
                } else {
                    let slice = host::kernel_slice();
                    params.push(quote!(#ident: &impl #slice<#elem>));
                    pushes.push(quote!(let #len: usize = __weft_args.push_slice(#name, #ident)?;));
                }
                let buffer = host::graph_buffer();
                record_params.push(quote!(#ident: &#graph impl #buffer<#elem>));
                // Shared in the graph (the host reads outputs between replays): a written one is pushed as such, so
                // that the recording refuses another argument over the same memory.
                let push = if *mutable { quote!(push_graph_buffer_mut) } else { quote!(push_graph_buffer) };
                record_pushes.push(quote!(let #len: usize = __weft_args.#push(#name, #ident)?;));
            }
            ParamKind::Scalar { rust } => {
                params.push(quote!(#ident: #rust));
                record_params.push(quote!(#ident: #rust));
                pushes.push(quote!(__weft_args.push_scalar(#name, #ident);));
                record_pushes.push(quote!(__weft_args.push_scalar(#name, #ident);));
            }
            ParamKind::LlA2aHandle => {
                // The host's handle, which only the device communicator makes (the kernel's `LlA2aHandle` type is
                // the device vocabulary's, for rustc to check the body against).
                let handle = host::ll_a2a_handle();
                params.push(quote!(#ident: &#handle<'_>));
                record_params.push(quote!(#ident: &#handle<'_>));
                pushes.push(quote!(__weft_args.push_ll_a2a_handle(#name, #ident);));
                record_pushes.push(quote!(__weft_args.push_ll_a2a_handle(#name, #ident);));
            }
            ParamKind::TmaMatrix { elem, sharded } => {
                let (operand, push) = if *sharded {
                    (host::tma_shards(), quote!(push_tma_shards))
                } else {
                    (host::tma_operand(), quote!(push_tma))
                };
                params.push(quote!(#ident: &#operand<'_, #elem>));
                record_params.push(quote!(#ident: &#graph #operand<'_, #elem>));
                pushes.push(quote!(__weft_args.#push(#name, #ident)?;));
                record_pushes.push(quote!(__weft_args.#push(#name, #ident)?;));
            }
            ParamKind::Other => {}
        }
    }

    let names: Vec<String> =
        sig.params.iter().filter(|p| !matches!(p.kind, ParamKind::Other)).map(|p| p.ident.to_string()).collect();
    let declared = super::launch_checks::declared_checks(sig, &attrs.len_checks);
    let proven = super::launch_checks::bounds_checks(sig, bounds, &cfg);

    let (entry, instantiated) = instantiated(sig);
    let (stream_ty, config, error) = (host::stream(), host::launch_config(), host::error());
    let (kernel_args, kernel_spec, bounds_checks) = (host::kernel_args(), host::kernel_spec(), host::bounds_checks());
    let device_checks = quote!(__WEFT_USAGE[1] & #DEVICE_CHECKS_BIT != 0);
    // A warp-wide collective (a shuffle, `mma`, a `Warp` session, …) with lanes that do not exist is as undefined as
    // one some lanes skip: blocks of whole warps only.
    let whole_warps = {
        let message = format!(
            "`{}` has warp-wide collectives (shuffles, warp reductions, `mma`, a `Warp` coop's session, …), which \
             need every lane of the warp, but this launch has blocks of {{:?}} threads, which end in a partial warp: \
             launch it with a multiple of 32 threads per block",
            sig.ident
        );
        quote! {
            if __WEFT_USAGE[1] & #WARP_COLLECTIVE_BIT != 0 {
                let __weft_threads = u64::from(#cfg.block_dim.0) * u64::from(#cfg.block_dim.1)
                    * u64::from(#cfg.block_dim.2);
                if __weft_threads % 32 != 0 {
                    return ::core::result::Result::Err(#error::InvalidArgument {
                        argument: "cfg",
                        problem: ::std::format!(#message, #cfg.block_dim),
                    });
                }
            }
        }
    };
    let body = |checked: bool, recording: bool| {
        let proven = if checked { proven.clone() } else { TokenStream::new() };
        let form = if checked { quote!(__WEFT_CHECKED_FORM) } else { quote!(#bounds_checks::Off) };
        let (start, pushes) = if recording {
            (quote!(#kernel_args::for_capture(NAME, &[#(#names),*], #capture)), &record_pushes)
        } else {
            (quote!(#kernel_args::with_parameters(NAME, &[#(#names),*], #stream)), &pushes)
        };
        quote! {
            let __weft_entry: &'static str = #entry;
            if __WEFT_USAGE[1] & #BLOCK_OF_256_BIT != 0 {
                ::weft::host::launch::check_block_of_256(NAME, &#cfg)?;
            }
            #whole_warps
            #(#checks)*
            let mut __weft_args = #start;
            if __WEFT_USAGE[1] & #GEMM_TILES_BIT != 0 {
                __weft_args.check_gemm_tiles(&#cfg)?;
            }
            #(#pushes)*
            #declared
            #proven
            let __weft_spec = #kernel_spec { name: NAME, source: __WEFT_SOURCE_STATIC, entry_point: __weft_entry };
            // SAFETY (the macro's, not the caller's): the source is this kernel's, generated by the macro with
            // `__weft_entry` among its entry points; the arguments were pushed above for every parameter, in order,
            // each by its kind; in `launch` every access is proven in bounds by the checks above or checked on the
            // device (the `On` form whenever the kernel or a device fn it calls has an unproven access); in
            // `launch_unchecked` the caller promised what those checks would have shown.
            unsafe { __weft_args.launch(&__weft_spec, #cfg, #form) }
        }
    };
    let (checked_body, unchecked_body, record_body) = (body(true, false), body(false, false), body(true, true));
    let capture_ty = host::capture();
    let record_generics: Vec<TokenStream> = std::iter::once(quote!(#graph)).chain(generics.iter().cloned()).collect();
    // `no_device_checks` covers the device fns the kernel calls too: their usage is known only to rustc. (The body's
    // own unproven accesses are errors already, each at its access.)
    let callees_proven = if attrs.no_device_checks && bounds.unproven().next().is_none() && resource_checks.is_empty() {
        let message = format!(
            "weft: kernel `{}` has #[kernel(no_device_checks)], but a device fn it calls has accesses checked on the \
             device (their lengths are the caller's): index them within the kernel, or drop `no_device_checks`",
            sig.ident
        );
        quote!(
            const _: () = ::core::assert!(!(#device_checks), #message);
        )
    } else {
        TokenStream::new()
    };
    let (launch_doc, unchecked_doc) = docs(sig, bounds, resource_checks, &stream);
    let record_doc = " Records this kernel into a CUDA graph being captured (`weft::host::Graph::capture`), with the \
         checks `launch` makes; it runs at each replay. Everything passed is borrowed for the graph's life \
         `'__weft_graph`, so no replay can outlive it; `&[T]` and `&mut [T]` parameters take weft `DeviceBuffer`s, and \
         `TmaMatrix<T>` parameters `TmaOperand`s over them (docs/graphs.md).\n\n Errors: as `launch`'s.";
    quote! {
        #callees_proven

        /// The form `launch` runs: with the device-side checks of the accesses weft could not prove in bounds when
        /// the kernel or a device fn it calls has any (`function` and `one_wave` load the same form).
        const __WEFT_CHECKED_FORM: #bounds_checks =
            if #device_checks { #bounds_checks::On } else { #bounds_checks::Off };

        #[doc = #launch_doc]
        #[allow(clippy::too_many_arguments, unused_variables)]
        pub fn launch<#(#generics),*>(
            #stream: &::std::sync::Arc<#stream_ty>,
            #cfg: #config,
            #(#params),*
        ) -> ::core::result::Result<(), #error> #instantiated {
            #checked_body
        }

        #[doc = #unchecked_doc]
        #[allow(clippy::too_many_arguments, unused_variables, unused_unsafe)]
        pub unsafe fn launch_unchecked<#(#generics),*>(
            #stream: &::std::sync::Arc<#stream_ty>,
            #cfg: #config,
            #(#params),*
        ) -> ::core::result::Result<(), #error> #instantiated {
            #unchecked_body
        }

        #[doc = #record_doc]
        #[allow(clippy::too_many_arguments, unused_variables)]
        pub fn record<#(#record_generics),*>(
            #capture: &mut #capture_ty<#graph>,
            #cfg: #config,
            #(#record_params),*
        ) -> ::core::result::Result<(), #error> #instantiated {
            #record_body
        }
    }
}

/// `launch`'s and `launch_unchecked`'s docs: what each checks, access by access.
fn docs(
    sig: &Signature,
    bounds: &Bounds,
    resource_checks: &[super::lower::ResourceCheck],
    stream: &Ident,
) -> (String, String) {
    let item = |s: &Site| format!("\n - `{}` (line {})", s.access.replace('`', "'"), s.line);
    let at_launch: String = bounds.at_launch().map(item).collect();
    let resource = |r: &super::lower::ResourceCheck| {
        format!("\n - `{}` (line {}), an index below the number of {}", r.access.replace('`', "'"), r.line, r.what)
    };
    let on_device: String = bounds.unproven().map(item).chain(resource_checks.iter().map(resource)).collect();
    let name = &sig.ident;
    let mut launch = format!(
        " Compiles `{name}` for the stream's GPU (once per process; cubins are cached on disk), checks what the types \
         cannot (the grid against the communicator's resources, buffers on the stream's device, declared `len(…)` \
         rules, and the bounds below) and launches it on `{stream}`.\n\n # Bounds\n\n Every access of the kernel \
         stays in its buffer (docs/macro.md, \"Bounds\")."
    );
    if !at_launch.is_empty() {
        launch.push_str(&format!(
            "\n\n Proved from the launch's values, checked before launching (`Error::OutOfBounds` names the access \
             otherwise):{at_launch}"
        ));
    }
    if !on_device.is_empty() {
        launch.push_str(&format!(
            "\n\n Not provable by the macro, so checked on the device (a failed check stops the kernel with a trap, \
             as a Rust panic would):{on_device}"
        ));
    }
    launch.push_str(
        "\n\n A device fn the kernel calls may add accesses checked on the device; `launch_unchecked` checks none.",
    );
    let mut unchecked = format!(
        " [`launch`] without its bounds checks: neither the proven accesses' bounds before launching nor the others \
         on the device (the declared `len(…)` rules and every other check of `launch` remain). For a kernel whose \
         bounds `launch` refuses though its accesses are guarded in a way the macro cannot follow, or whose device \
         checks cost too much.\n\n # Safety\n\n Every memory access of `{name}` (and of the device fns it calls) \
         must stay inside the buffer, window, view or shared array it goes through, for the values and buffers \
         passed and the launch geometry `cfg`."
    );
    if !at_launch.is_empty() {
        unchecked.push_str(&format!(
            "\n\n In particular these accesses, which `launch` would check before launching:{at_launch}"
        ));
    }
    if !on_device.is_empty() {
        unchecked.push_str(&format!("\n\n and these, which `launch` checks on the device:{on_device}"));
    }
    (launch, unchecked)
}
