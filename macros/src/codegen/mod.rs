//! The translation, as plain library code over `proc_macro2` (testable without the compiler's macro machinery):
//!
//! - `attr`: the attribute's arguments;
//! - `ast`: the signature, checked and classified (parse);
//! - `valid`: rejections of unsupported syntax, each naming the replacement (validate);
//! - `lower`: the body as C++, with literal typing, methods resolved by type (`vocabulary`'s types) and
//!   capability/resource inference (lower);
//! - `cuda`, `expand`, `launcher`: the C++ translation unit and the Rust module around it (emit).
//!
//! Every pass reports into one `Ctxt`, so all problems of a function are reported together; on error the user's
//! function is still emitted, and the generated module too when the signature could be understood.

pub(crate) mod ast;
pub(crate) mod attr;
pub(crate) mod bounds;
pub(crate) mod ctxt;
pub(crate) mod cuda;
pub(crate) mod expand;
pub(crate) mod launch_checks;
pub(crate) mod launcher;
pub(crate) mod lower;
pub(crate) mod module_api;
pub(crate) mod types;
pub(crate) mod uniform;
pub(crate) mod usage;
pub(crate) mod valid;
pub(crate) mod vocabulary;

use proc_macro2::TokenStream;
use quote::quote;
use syn::ItemFn;

use ast::{FnKind, ParamKind, Signature};
use attr::{AttrKind, Attributes, Declared, LaunchBounds};
use ctxt::Ctxt;
use lower::{LoweredBody, Options};
use usage::Usage;

/// What one function turned into.
pub(crate) struct Analysis {
    pub(crate) sig: Signature,
    pub(crate) attrs: Attributes,
    pub(crate) lowered: LoweredBody,
    /// The body's usage plus what the signature and the attribute declare.
    pub(crate) usage: Usage,
    /// Calls of device fns under control flow not every thread takes (checked against their collectives).
    pub(crate) divergent_calls: Vec<uniform::DivergentCall>,
}

pub(crate) fn analyze(kind: FnKind, attr: TokenStream, item: &ItemFn, options: Options, cx: &Ctxt) -> Option<Analysis> {
    let attr_kind = match kind {
        FnKind::Kernel => AttrKind::Kernel,
        FnKind::DeviceFn => AttrKind::DeviceFn,
    };
    let attrs = attr::parse(attr_kind, attr, cx);
    valid::check_body(&item.sig.ident.to_string(), &item.block, cx);
    let (sig, complete) = ast::parse(kind, item, &attrs, cx);
    check_len_checks(&sig, &attrs, cx);
    // Lowered even after errors: what only the lowering sees (an unknown method, an untyped index) is reported
    // with the rest, all at once.
    let lowered = lower::lower_body(&sig, item, &attrs, options, cx);
    let collectives = uniform::check(&sig, item, cx);
    if !complete {
        return None;
    }
    // `gemm_tiles` hands the producer's registers to the consumers (setmaxnreg): ptxas must compile the kernel for
    // 384 threads and one block per SM, or the launch asks for more registers than an SM has.
    if kind == FnKind::Kernel
        && lowered.usage.gemm_tiles
        && !matches!(attrs.launch_bounds, Some(LaunchBounds { max_threads: 384, min_blocks: Some(1) }))
    {
        cx.error_spanned_by(
            &item.sig.ident,
            "a kernel that opens `gemm_tiles` runs 384 threads, one block per multiprocessor: declare \
             `#[weft::kernel(launch_bounds(384, 1))]`",
        );
        return None;
    }
    let mut usage = lowered.usage.clone();
    usage.caps = usage.caps.union(sig.declared_caps());
    usage.block_collective = collectives.block_collective;
    usage.warp_collective = collectives.warp_collective;
    for (resource, declared, _) in &attrs.declared {
        match declared {
            Declared::Count(n) => usage.add_count(*resource, *n),
            Declared::Grid => usage.add_grid(*resource),
        }
    }
    Some(Analysis { sig, attrs, lowered, usage, divergent_calls: collectives.divergent_calls })
}

fn check_len_checks(sig: &Signature, attrs: &Attributes, cx: &Ctxt) {
    let has_dev = sig.params.iter().any(|p| matches!(p.kind, ParamKind::DevComm { .. }));
    let has_window = sig.params.iter().any(|p| matches!(p.kind, ParamKind::Window { .. }));
    for check in &attrs.len_checks {
        for ident in check.lhs.names().into_iter().chain(check.rhs.names()) {
            match sig.params.iter().find(|p| p.ident == *ident).map(|p| (&p.kind, &p.ty)) {
                Some((ParamKind::Window { .. } | ParamKind::Slice { .. }, _)) => {}
                Some((ParamKind::Scalar { rust }, _)) if is_integer_type(rust) => {}
                // Refused by the signature's checks, which said why.
                Some((_, types::Ty::Error)) => {}
                Some(_) => cx.error_spanned_by(
                    ident,
                    format!("`{ident}` has no length: `len(…)` compares slices, windows and integer parameters"),
                ),
                None if attr::TEAM_VALUES.contains(&ident.to_string().as_str()) => {
                    let lsa = ident.to_string().starts_with("lsa_");
                    if !(has_dev || lsa && has_window) {
                        cx.error_spanned_by(
                            ident,
                            format!(
                                "`{ident}` is a value of the device communicator's teams, and this kernel takes no \
                                 `&DevComm` to read it from: add a `dev: &DevComm<…>` parameter"
                            ),
                        );
                    }
                }
                None => cx.error_spanned_by(
                    ident,
                    format!(
                        "`{ident}` is not a parameter of this kernel (nor a team value: `lsa_size`, `lsa_rank`, \
                         `nranks`, `rank`)"
                    ),
                ),
            }
        }
    }
}

fn is_integer_type(ty: &syn::Type) -> bool {
    types::last_ident(ty).and_then(|n| types::Scalar::from_name(&n)).is_some_and(|s| s.is_integer())
}

/// What one expansion produced: the tokens the compiler gets and the errors among them (the fuzzer checks both).
pub(crate) struct Expansion {
    pub(crate) tokens: TokenStream,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) errors: Vec<syn::Error>,
}

/// `#[kernel]`: the user's function and its generated module.
pub(crate) fn expand_kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(FnKind::Kernel, attr, item).tokens
}

/// `#[device_fn]`: the user's function and its companion module.
pub(crate) fn expand_device_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand(FnKind::DeviceFn, attr, item).tokens
}

/// Either macro, as library code.
pub(crate) fn expand(kind: FnKind, attr: TokenStream, item: TokenStream) -> Expansion {
    let name = match kind {
        FnKind::Kernel => "kernel",
        FnKind::DeviceFn => "device_fn",
    };
    let item_fn: ItemFn = match parse_function(&item) {
        Ok(f) => f,
        Err(e) => {
            let e = not_a_function(name, &attr, &item, e);
            let err = e.to_compile_error();
            return Expansion { tokens: quote!(#err #item), errors: vec![e] };
        }
    };
    let cx = Ctxt::new();
    let analysis = analyze(kind, attr, &item_fn, Options { line_comments: true }, &cx);
    let user = expand::user_fn(&item_fn);
    let module = analysis.map(|a| match kind {
        FnKind::Kernel => {
            let header = cuda::header(&a.sig.ident.to_string());
            let kernel = cuda::kernel(&a.sig, &item_fn, &a.lowered, a.attrs.launch_bounds, &cx);
            if a.attrs.debug {
                print_debug(&a, &header, &kernel);
            }
            // After an error, the module still exists (launch calls elsewhere keep type-checking) but names no
            // callee: a closure or recursive call the error is about would only add rustc's unresolved-path noise.
            let calls = if cx.error_count() == 0 { &a.lowered.calls[..] } else { &[] };
            expand::kernel_module(
                &item_fn,
                &a.sig,
                &a.attrs,
                &header,
                &kernel,
                &a.usage,
                &a.lowered,
                calls,
                &a.divergent_calls,
            )
        }
        FnKind::DeviceFn => {
            let source = cuda::device_fn(&a.sig, &item_fn, &a.lowered, &cx);
            if a.attrs.debug {
                eprintln!("{source}");
            }
            let calls = if cx.error_count() == 0 { &a.lowered.calls[..] } else { &[] };
            expand::device_fn_module(&item_fn, &source, &a.usage, calls, &a.divergent_calls)
        }
    });
    let errors = cx.into_errors();
    let error_tokens = errors.iter().map(|e| e.to_compile_error());
    let tokens = quote! {
        #(#error_tokens)*
        #user
        #module
    };
    Expansion { tokens, errors }
}

/// The item as a function. syn reports an item that ends too early ("expected `,`") on the next token, which at the
/// end of the item is no place in the source (the call site); a `;` after the item, spanned at its last token,
/// gives that error a place.
fn parse_function(item: &TokenStream) -> syn::Result<ItemFn> {
    let end = item.clone().into_iter().last().map(|t| t.span());
    let mut tokens = item.clone();
    if let Some(span) = end {
        tokens.extend(quote::quote_spanned!(span=> ;));
    }
    syn::parse::Parser::parse2(
        |input: syn::parse::ParseStream<'_>| {
            let f: ItemFn = input.parse()?;
            if end.is_some() {
                input.parse::<syn::Token![;]>()?;
            }
            Ok(f)
        },
        tokens,
    )
}

/// The macro is on something that is not a function. syn's error says where parsing stopped; when the item ended
/// early that is no place in the source (the call site), so the error is put on the item's last token instead (or
/// the attribute's, for an item with none, which rustc never passes).
fn not_a_function(name: &str, attr: &TokenStream, item: &TokenStream, e: syn::Error) -> syn::Error {
    let message = format!("#[weft::{name}] goes on a function: {e}");
    if !e.to_string().starts_with("unexpected end of input") && !item.is_empty() {
        return syn::Error::new(e.span(), message);
    }
    match item.clone().into_iter().last().or_else(|| attr.clone().into_iter().last()) {
        Some(last) => syn::Error::new(last.span(), message),
        None => syn::Error::new(e.span(), message),
    }
}

fn print_debug(a: &Analysis, header: &str, kernel: &str) {
    let callees: Vec<String> = a.lowered.calls.iter().map(|p| quote!(#p).to_string().replace(' ', "")).collect();
    eprintln!("// ===== #[weft::kernel({})] generated C++ =====", a.sig.ident);
    eprint!("{header}");
    if !callees.is_empty() {
        eprintln!("// (the C++ of the device fns {} goes here)\n", callees.join(", "));
    }
    eprintln!("{kernel}");
}

/// The complete C++ of a kernel without device-fn calls (or with their sources given): for tests and tools.
pub(crate) fn generate_cuda_with(
    attr: TokenStream,
    item: &ItemFn,
    device_fn_sources: &[String],
    options: Options,
) -> Result<String, Vec<syn::Error>> {
    let cx = Ctxt::new();
    let analysis = analyze(FnKind::Kernel, attr, item, options, &cx);
    let out = analysis.map(|a| {
        let mut source = cuda::header(&a.sig.ident.to_string());
        for s in device_fn_sources {
            source.push_str(s);
        }
        source.push_str(&cuda::kernel(&a.sig, item, &a.lowered, a.attrs.launch_bounds, &cx));
        source
    });
    let errors = cx.into_errors();
    match out {
        Some(s) if errors.is_empty() => Ok(s),
        _ => Err(errors),
    }
}

/// The C++ of a kernel (`#[kernel]` without arguments, no device fns).
#[allow(dead_code)]
pub(crate) fn generate_cuda(item: &ItemFn) -> Result<String, Vec<syn::Error>> {
    generate_cuda_with(TokenStream::new(), item, &[], Options { line_comments: true })
}

/// The C++ definition of a device fn.
#[allow(dead_code)]
pub(crate) fn generate_device_fn_cuda(
    attr: TokenStream,
    item: &ItemFn,
    options: Options,
) -> Result<String, Vec<syn::Error>> {
    let cx = Ctxt::new();
    let analysis = analyze(FnKind::DeviceFn, attr, item, options, &cx);
    let out = analysis.map(|a| cuda::device_fn(&a.sig, item, &a.lowered, &cx));
    let errors = cx.into_errors();
    match out {
        Some(s) if errors.is_empty() => Ok(s),
        _ => Err(errors),
    }
}
