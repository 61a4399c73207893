//! The generated module's lookup, geometry and compile-check items: what a program would otherwise write by hand
//! with entry-point strings (`KernelSpec { entry_point: "lsa_allreduce__f32", .. }`).
//!
//! For a kernel generic over element types, each item takes them as type arguments (`one_wave::<f32>(…)`); the
//! entry point comes from the type's `Instantiated` impl (expand.rs), so a type the kernel is not instantiated for is a
//! trait error at the call.

use proc_macro2::TokenStream;
use quote::quote;

use super::ast::Signature;

/// `spec`, `function`, `one_wave` and `compile_check`.
pub(crate) fn items(sig: &Signature) -> TokenStream {
    let element = quote!(::weft::device::Element);
    let generics: Vec<TokenStream> = sig
        .elements
        .iter()
        .map(|e| {
            let ident = &e.ident;
            let mut bounds: Vec<TokenStream> = e.bounds.iter().map(|b| quote!(#b)).collect();
            bounds.push(element.clone());
            quote!(#ident: #(#bounds)+*)
        })
        .collect();
    let args: Vec<TokenStream> = sig.elements.iter().map(|e| &e.ident).map(|i| quote!(#i)).collect();
    let (params, turbofish) =
        if generics.is_empty() { (quote!(), quote!()) } else { (quote!(<#(#generics),*>), quote!(::<#(#args),*>)) };
    let (entry, instantiated) = super::launcher::instantiated(sig);
    let (spec_ty, error, config, stream) = (
        quote!(::weft::host::jit::KernelSpec),
        quote!(::weft::host::Error),
        quote!(::weft::host::LaunchConfig),
        quote!(::weft::host::launch::CudaStream),
    );
    let (context, function_ty) =
        (quote!(::weft::host::cudarc::driver::CudaContext), quote!(::weft::host::cudarc::driver::CudaFunction));
    let types_note = if sig.elements.is_empty() { "" } else { " for the element types given as type arguments" };
    let spec_doc = format!(" The kernel's name, source and entry point{types_note}, for the JIT's lookups.");
    let function_doc = format!(
        " The kernel{types_note} compiled for `ctx`'s GPU (once per process; cubins are cached on disk) and loaded \
         into it: what `launch` runs (with its device-side bounds checks, if any; `launch_unchecked` runs the form \
         without them), for occupancy queries and raw launches."
    );
    let wave_doc = format!(
        " One full wave of `block`-thread blocks of the kernel{types_note} for `comm`'s rank: the GPU's resident \
         blocks divided among the ranks sharing it (`Communicator::one_wave`)."
    );
    let check_doc =
        " Compiles the kernel's CUDA C++ (every instantiation) with `toolchain` for `arch`, through `cache`: the \
                     check a program without a GPU can still make that the kernel builds against an NCCL release's \
                     headers.";
    quote! {
        #[doc = #spec_doc]
        pub fn spec #params () -> #spec_ty #instantiated {
            #spec_ty { name: NAME, source: __WEFT_SOURCE_STATIC, entry_point: #entry }
        }

        #[doc = #function_doc]
        pub fn function #params (ctx: &::std::sync::Arc<#context>) -> ::core::result::Result<#function_ty, #error>
        #instantiated
        {
            // The form the checked `launch` runs: its occupancy is the one that matters, and a rank loading another
            // form at its first launch could wait for the peers' kernels (docs/multi-rank.md, "Load before launch").
            let alignment = ::weft::host::jit::ArgAlignment::Aligned16;
            let function = ::weft::host::jit::function_in(ctx, &spec #turbofish (), alignment, __WEFT_CHECKED_FORM)?;
            ::core::result::Result::Ok(function)
        }

        #[doc = #wave_doc]
        pub fn one_wave #params (
            comm: &impl ::weft::host::launch::GpuShare,
            stream: &::std::sync::Arc<#stream>,
            block: u32,
        ) -> ::core::result::Result<#config, #error>
        #instantiated
        {
            let function = function #turbofish (stream.context())?;
            #config::one_wave_shared(&function, stream, block, comm.ranks_on_gpu())
        }

        #[doc = #check_doc]
        pub fn compile_check(
            toolchain: &::weft::host::jit::Toolchain,
            cache: &::weft::host::jit::KernelCache,
            arch: ::weft::host::jit::GpuArch,
        ) -> ::core::result::Result<::weft::host::jit::CompiledKernel, ::weft::host::jit::JitError> {
            let request = ::weft::host::jit::CompileRequest::new(NAME, SOURCE, ::weft::device::WEFT_CUH, arch);
            cache.get_or_compile(toolchain, &request)
        }
    }
}
