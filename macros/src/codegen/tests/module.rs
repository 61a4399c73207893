//! The Rust the macros expand to (its compilation against the real crates is `tests/expand.rs`).

use proc_macro2::TokenStream;
use quote::quote;

use crate::codegen::{expand_device_fn, expand_kernel};

/// Token text with spaces squeezed out, for robust `contains` checks.
fn squeeze(t: TokenStream) -> String {
    t.to_string().chars().filter(|c| !c.is_whitespace()).collect()
}

#[track_caller]
fn assert_has(haystack: &str, needle: &str) {
    let needle: String = needle.chars().filter(|c| !c.is_whitespace()).collect();
    assert!(haystack.contains(&needle), "`{needle}` not in:\n{haystack}");
}

#[test]
fn kernel_keeps_the_function_and_adds_a_module_of_the_same_name() {
    let out = squeeze(expand_kernel(
        quote!(),
        quote! {
            pub fn allreduce_add<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
                for i in grid_stride(n) { out[i] = x.local()[i]; }
            }
        },
    ));
    assert_has(&out, r#"#[allow(dead_code)] pub fn allreduce_add<T: Float>(dev: &DevComm<Lsa>,"#);
    assert_has(&out, r#"pub mod allreduce_add { use super::*;"#);
    assert_has(&out, r#"pub const NAME: &str = "allreduce_add";"#);
    assert_has(&out, r#"pub const ENTRY_POINTS: &[&str] = &["rs_allreduce_add__f32", "rs_allreduce_add__bf16"];"#);
    assert_has(&out, r#"pub const CAPABILITIES: ::weft::device::caps::Capabilities"#);
    assert_has(&out, r#"pub fn requirements(cfg: &::weft::host::LaunchConfig) -> ::weft::host::Requirements"#);
    assert_has(
        &out,
        r#"pub fn launch<T: Float + ::weft::device::Element, __WeftCaps: ::weft::device::caps::HasLsa, __WeftMode: ::weft::host::Mode>(
            stream: &::std::sync::Arc<::weft::host::launch::CudaStream>,
            cfg: ::weft::host::LaunchConfig,
            dev: &::weft::host::DevComm<'_, __WeftCaps, __WeftMode>,
            x: &impl ::weft::host::launch::KernelWindow<T>,
            out: &mut impl ::weft::host::launch::KernelSliceMut<T>,
            n: usize
        ) -> ::core::result::Result<(), ::weft::host::Error> where T: Instantiated"#,
    );
    assert_has(&out, r#"dev.check_requirements(NAME, &cfg, &requirements(&cfg))?;"#);
    assert_has(&out, r#"__weft_args.push_dev_comm("dev", dev)?;"#);
    assert_has(&out, r#"let __weft_len_x: usize = __weft_args.push_window("x", x)?;"#);
    assert_has(&out, r#"__weft_args.push_scalar("n", n);"#);
    assert_has(&out, r#"let __weft_entry: &'static str = <T as Instantiated>::ENTRY_POINT;"#);
}

#[test]
fn module_visibility_follows_the_function() {
    let private = squeeze(expand_kernel(quote!(), quote! { fn k(out: &mut [f32]) {} }));
    assert!(private.contains("modk{") && !private.contains("pubmodk{"), "{private}");
    let crate_vis = squeeze(expand_kernel(quote!(), quote! { pub(crate) fn k(out: &mut [f32]) {} }));
    assert!(crate_vis.contains("pub(crate)modk{"), "{crate_vis}");
}

#[test]
fn scalar_parameters_of_element_type_need_the_hosts_element() {
    let out = squeeze(expand_kernel(quote!(), quote! { fn k<T: Float>(x: &mut [T], a: T) {} }));
    assert_has(&out, r#"T: Float + ::weft::device::Element + ::weft::host::Element"#);
}

#[test]
fn launcher_names_avoid_the_kernels_parameters() {
    let out = squeeze(expand_kernel(quote!(), quote! { fn k(stream: &mut [f32], cfg: u32) {} }));
    assert_has(
        &out,
        r#"launch_stream: &::std::sync::Arc<::weft::host::launch::CudaStream>, launch_cfg: ::weft::host::LaunchConfig, stream: &mut impl"#,
    );
}

#[test]
fn an_ll_a2a_handle_parameter_takes_the_hosts_handle() {
    // Not the vocabulary's struct (public fields, any value): the host's, which only the device communicator makes.
    let out = squeeze(expand_kernel(
        quote!(),
        quote! { fn k(dev: &DevComm<Lsa>, h: LlA2aHandle, out: &mut [f32]) { let a = dev.ll_a2a(Warp, h, 0, 4); out[0] = a.recv(0); } },
    ));
    assert_has(&out, "h: &::weft::host::devcomm::LlA2aHandle<'_>,");
    assert_has(&out, r#"__weft_args.push_ll_a2a_handle("h", h);"#);
}

#[test]
fn capability_generic_communicator_keeps_its_parameter() {
    let out = squeeze(expand_kernel(quote!(), quote! { fn k<C: HasLsa + HasGin>(dev: &DevComm<C>) {} }));
    assert_has(&out, r#"C: ::weft::device::caps::HasLsa + ::weft::device::caps::HasGin"#);
    assert_has(&out, r#"dev: &::weft::host::DevComm<'_, C, __WeftMode>"#);
}

#[test]
fn length_checks_are_emitted() {
    let out = squeeze(expand_kernel(
        quote!(len(x == out, out >= n * lsa_size + 1)),
        quote! { fn k(dev: &DevComm<Lsa>, x: &[f32], out: &mut [f32], n: usize) {} },
    ));
    // Each side is computed on the host without wrapping; a rule whose arithmetic fails is a failed rule.
    assert_has(
        &out,
        r#"match (::core::option::Option::Some(__weft_len_x as u128), ::core::option::Option::Some(__weft_len_out as u128)) {
            (::core::option::Option::Some(__weft_l), ::core::option::Option::Some(__weft_r)) if __weft_l == __weft_r => {}
            _ => return ::core::result::Result::Err(::weft::host::launch::length_check_failed(NAME, "x == out", &[("x", ::core::option::Option::Some(__weft_len_x as u128).unwrap_or(0) as u64), ("out", ::core::option::Option::Some(__weft_len_out as u128).unwrap_or(0) as u64)])),
        }"#,
    );
    // Team values come from the device communicator's team.
    assert_has(&out, "let __weft_team_lsa: (::weft::host::launch::bounds::Interval, ::weft::host::launch::bounds::Interval) = ::weft::host::launch::bounds::lsa_team(dev)?;");
    assert_has(
        &out,
        "::weft::host::launch::bounds::rule(::weft::host::launch::bounds::rule(::core::option::Option::Some(n as u128), __weft_team_lsa.0.bounds().map(|(value, _)| value), u128::checked_mul), ::core::option::Option::Some(1u128), u128::checked_add)",
    );
}

#[test]
fn launch_checks_proven_bounds_and_launch_unchecked_does_not() {
    let out = squeeze(expand_kernel(
        quote!(),
        quote! {
            fn k(x: &[f32], out: &mut [f32], n: usize) {
                for i in grid_stride(n) {
                    out[i] = x[i];
                }
            }
        },
    ));
    // `launch` evaluates the index's range on the launch's values and checks it against each buffer's length.
    assert_has(&out, "let __weft_b2: ::weft::host::launch::bounds::Interval = ::weft::host::launch::bounds::Interval::point(n as u128);");
    assert_has(&out, "let __weft_b4: ::weft::host::launch::bounds::Interval = ::weft::host::launch::bounds::Interval::range(__weft_b3, __weft_b2, false);");
    assert_has(
        &out,
        r#"::weft::host::launch::bounds::require_index(NAME, &::weft::host::launch::bounds::Site { parameter: "out", access: "out[i]", line: 1u32 }, __weft_b4, __weft_b1)?;"#,
    );
    assert_has(
        &out,
        r#"::weft::host::launch::bounds::require_index(NAME, &::weft::host::launch::bounds::Site { parameter: "x", access: "x[i]", line: 1u32 }, __weft_b4, __weft_b0)?;"#,
    );
    assert_has(&out, "const__WEFT_CHECKED_FORM:::weft::host::jit::BoundsChecks=if__WEFT_USAGE[1]&8u32!=0{::weft::host::jit::BoundsChecks::On}else{::weft::host::jit::BoundsChecks::Off};");
    assert_has(&out, "unsafe{__weft_args.launch(&__weft_spec,cfg,__WEFT_CHECKED_FORM)}");
    // `launch_unchecked` is `unsafe`, checks no bound and runs the form without device checks.
    let unchecked = &out[out.find("pubunsafefnlaunch_unchecked").expect("launch_unchecked")..];
    let (unchecked, record) = unchecked.split_at(unchecked.find("pubfnrecord").expect("record"));
    assert!(!unchecked.contains("require_index"), "{unchecked}");
    assert_has(unchecked, "unsafe{__weft_args.launch(&__weft_spec,cfg,::weft::host::jit::BoundsChecks::Off)}");
    // `record` (into a CUDA graph) borrows everything for the graph's life, takes weft buffers for both slices (the
    // `&mut [T]` one pushed as an output, so an overlap with another argument is refused), and makes `launch`'s
    // checks.
    assert_has(record, "pubfnrecord<'__weft_graph>(capture:&mut::weft::host::graph::Capture<'__weft_graph>,cfg:::weft::host::LaunchConfig,x:&'__weft_graphimpl::weft::host::graph::GraphBuffer<f32>,out:&'__weft_graphimpl::weft::host::graph::GraphBuffer<f32>,n:usize)");
    assert_has(record, r#"::weft::host::launch::KernelArgs::for_capture(NAME,&["x","out","n"],capture)"#);
    assert_has(record, r#"__weft_args.push_graph_buffer("x",x)?;"#);
    assert_has(record, r#"__weft_args.push_graph_buffer_mut("out",out)?;"#);
    assert!(record.contains("require_index"), "{record}");
    assert_has(record, "unsafe{__weft_args.launch(&__weft_spec,cfg,__WEFT_CHECKED_FORM)}");
}

#[test]
fn kernel_source_joins_the_device_fns_it_calls() {
    let out = squeeze(expand_kernel(
        quote!(),
        quote! {
            fn k(out: &mut [f32]) {
                out[0] = helper(1.0) + self::inner::other(2.0) + super::outer(3.0) + crate::util::far(4.0)
                    + crate::elsewhere::helper(5.0);
                out[1] = sqrt(out[0]) + weft::device::max(out[0], 1.0);
                sync_threads();
            }
        },
    ));
    // Paths as written, one module deeper, imported under aliases that say what a callee must be (a second
    // `helper` gets a numbered alias); vocabulary functions have no source to join.
    assert_has(
        &out,
        r#"use helper as helper_must_be_a_weft_device_fn; use super::inner::other as other_must_be_a_weft_device_fn; use super::super::outer as outer_must_be_a_weft_device_fn; use crate::util::far as far_must_be_a_weft_device_fn; use crate::elsewhere::helper as helper_must_be_a_weft_device_fn_4;"#,
    );
    assert_has(
        &out,
        r#"helper_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.source(), other_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.source(), outer_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.source(), far_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.source(), helper_must_be_a_weft_device_fn_4::__WEFT_DEVICE_FN.source(),"#,
    );
    for vocabulary in ["sqrt::", "max::", "sync_threads::"] {
        assert!(!out.contains(vocabulary), "{vocabulary} referenced: {out}");
    }
    assert_has(
        &out,
        r#", helper_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage(), other_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage()"#,
    );
    // Each token belongs to a function of the callee's name (a token copied from another device fn is refused).
    assert_has(
        &out,
        r#"const _: () = ::core::assert!(::weft::__private::str_eq(helper_must_be_a_weft_device_fn_4::__WEFT_DEVICE_FN.name(), "helper"),"#,
    );
}

#[test]
fn device_fn_companion_module() {
    let out = squeeze(expand_device_fn(
        quote!(),
        quote! {
            pub fn helper(x: f32) -> f32 { other(x) * 2.0 }
        },
    ));
    assert_has(&out, r#"#[allow(dead_code)] pub fn helper(x: f32) -> f32"#);
    assert_has(&out, r#"pub mod helper { use super::*;"#);
    assert_has(&out, r#"use other as other_must_be_a_weft_device_fn;"#);
    assert_has(
        &out,
        r#"const __WEFT_PARTS: &[&str] = &[other_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.source(), __WEFT_OWN];"#,
    );
    assert_has(&out, r#"const __WEFT_USAGE: &[u32] = &__weft_merge_usage(&[&["#);
    assert_has(&out, r#", other_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage()]);"#);
    // The companion's only public item is its token, made in the expansion's own `unsafe` block.
    assert!(!out.contains("pub const __WEFT_SOURCE") && !out.contains("pub const __WEFT_USAGE"), "{out}");
    assert_has(
        &out,
        r#"pub const __WEFT_DEVICE_FN: ::weft::__private::DeviceFn = unsafe { ::weft::__private::DeviceFn::new("helper", __WEFT_SOURCE, __WEFT_USAGE) };"#,
    );
}

#[test]
fn default_instantiations_follow_the_bounds() {
    let entries = |item: TokenStream| -> Vec<String> {
        let item: syn::ItemFn = syn::parse2(item).unwrap();
        let cx = crate::codegen::ctxt::Ctxt::new();
        let attrs = crate::codegen::attr::Attributes::default();
        let (sig, complete) = crate::codegen::ast::parse(crate::codegen::ast::FnKind::Kernel, &item, &attrs, &cx);
        assert!(complete);
        sig.instantiations().iter().map(|t| sig.entry_point(t)).collect()
    };
    assert_eq!(entries(quote! { fn k<T: Float + Shuffle>(x: &[T]) {} }), ["rs_k__f32", "rs_k__bf16"]);
    assert_eq!(
        entries(quote! { fn k<T: AtomicMinMax>(x: &[T]) {} }),
        ["rs_k__i32", "rs_k__u32", "rs_k__i64", "rs_k__u64"]
    );
    assert_eq!(entries(quote! { fn k<T: Float + AtomicBits>(x: &[T]) {} }), ["rs_k__f32"]);
    assert_eq!(
        entries(quote! { fn k<T: Numeric + Copy>(x: &[T]) {} }),
        ["rs_k__f32", "rs_k__bf16", "rs_k__f16", "rs_k__f64", "rs_k__i32", "rs_k__u32", "rs_k__i64", "rs_k__u64"]
    );
    assert_eq!(
        entries(quote! { fn k<T: Float, I>(x: &[T], i: &[I]) where I: AtomicMinMax {} }),
        [
            "rs_k__f32__i32",
            "rs_k__f32__u32",
            "rs_k__f32__i64",
            "rs_k__f32__u64",
            "rs_k__bf16__i32",
            "rs_k__bf16__u32",
            "rs_k__bf16__i64",
            "rs_k__bf16__u64"
        ]
    );
}

#[test]
fn launch_bounds_go_on_every_entry_point() {
    let two = squeeze(expand_kernel(
        quote!(types(f32, bf16), launch_bounds(512, 3)),
        quote! { fn k<T: Float>(out: &mut [T]) { out[0] = T::zero(); } },
    ));
    assert_has(&two, r#"extern \"C\" __global__ void __launch_bounds__(512, 3) rs_k__f32("#);
    assert_has(&two, r#"extern \"C\" __global__ void __launch_bounds__(512, 3) rs_k__bf16("#);
    let one = squeeze(expand_kernel(quote!(launch_bounds(128)), quote! { fn k(out: &mut [f32]) { out[0] = 1.0; } }));
    assert_has(&one, r#"extern \"C\" __global__ void __launch_bounds__(128) rs_k("#);
    let none = squeeze(expand_kernel(quote!(), quote! { fn k(out: &mut [f32]) { out[0] = 1.0; } }));
    assert!(!none.contains("__launch_bounds__"), "{none}");
}

#[test]
fn every_instantiation_is_checked_against_the_bounds_by_rustc() {
    let out = squeeze(expand_kernel(
        quote!(types(T = [f32, bf16], I = [u32])),
        quote! { fn k<T: Float, I: AtomicMinMax>(x: &mut [T], i: &[I]) {} },
    ));
    // rustc checks these calls under `cargo check`: a listed type the bounds do not admit is an error naming it.
    assert_has(
        &out,
        "fn __weft_instantiable<T: Float + ::weft::device::Element, I: AtomicMinMax + ::weft::device::Element>() {}",
    );
    assert_has(&out, "__weft_instantiable::<f32, u32>();");
    assert_has(&out, "__weft_instantiable::<::weft::device::bf16, u32>();");
}

#[test]
fn launching_an_uninstantiated_type_names_it() {
    let out = squeeze(expand_kernel(quote!(types(f32, bf16)), quote! { fn k<T: Float>(x: &mut [T]) {} }));
    // A sealed trait implemented per instantiation: `launch` requires it, so rustc reports a missing type at the call
    // (under `cargo check` too), with this message.
    assert_has(
        &out,
        r#"#[diagnostic::on_unimplemented(message = "weft: kernel `k` has no entry point for the element type(s) `{Self}`","#,
    );
    assert_has(&out, r#"(`k` is instantiated for (f32), (bf16)); generic host code that launches it bounds its type"#);
    assert_has(&out, r#"`T: k::Instantiated`"#);
    assert_has(&out, r#"pub trait Instantiated: __weft_sealed::Sealed {"#);
    assert_has(&out, r#"impl Instantiated for f32 { const ENTRY_POINT: &'static str = "rs_k__f32"; }"#);
    assert_has(
        &out,
        r#"impl Instantiated for ::weft::device::bf16 { const ENTRY_POINT: &'static str = "rs_k__bf16"; }"#,
    );
    // Several element parameters: the tuple.
    let two = squeeze(expand_kernel(
        quote!(types(T = [f32], I = [u32, i32])),
        quote! { fn k<T: Float, I: AtomicMinMax>(x: &mut [T], i: &[I]) {} },
    ));
    assert_has(&two, r#"impl Instantiated for (f32, i32) { const ENTRY_POINT: &'static str = "rs_k__f32__i32"; }"#);
    assert_has(&two, r#"where (T, I): Instantiated"#);
    assert_has(&two, r#"`(T, I): k::Instantiated`"#);
}

#[test]
fn modules_carry_lookup_geometry_and_compile_check_per_element_type() {
    let generic = squeeze(expand_kernel(
        quote!(),
        quote! { pub fn k<T: Float>(dev: &DevComm<Lsa>, out: &mut [T], n: usize) { for i in grid_stride(n) { out[i] = T::zero(); } } },
    ));
    assert_has(
        &generic,
        r#"pub fn spec<T: Float + ::weft::device::Element>() -> ::weft::host::jit::KernelSpec where T: Instantiated"#,
    );
    assert_has(
        &generic,
        r#"::weft::host::jit::KernelSpec { name: NAME, source: __WEFT_SOURCE_STATIC,
           entry_point: <T as Instantiated>::ENTRY_POINT }"#,
    );
    assert_has(&generic, r#"pub fn function<T: Float + ::weft::device::Element>(ctx:"#);
    // The form `launch` runs: with device checks when the kernel has accesses the macro could not prove.
    assert_has(
        &generic,
        r#"const __WEFT_CHECKED_FORM: ::weft::host::jit::BoundsChecks =
           if __WEFT_USAGE[1] & 8u32 != 0 { ::weft::host::jit::BoundsChecks::On } else { ::weft::host::jit::BoundsChecks::Off };"#,
    );
    assert_has(&generic, r#"::weft::host::jit::function_in(ctx, &spec::<T>(), alignment, __WEFT_CHECKED_FORM)"#);
    assert_has(
        &generic,
        r#"pub fn one_wave<T: Float + ::weft::device::Element>(comm: &impl ::weft::host::launch::GpuShare,"#,
    );
    assert_has(&generic, r#"let function = function::<T>(stream.context())?;"#);
    assert_has(&generic, r#"one_wave_shared(&function, stream, block, comm.ranks_on_gpu())"#);
    assert_has(&generic, r#"pub fn compile_check(toolchain: &::weft::host::jit::Toolchain,"#);
    let plain = squeeze(expand_kernel(quote!(), quote! { pub fn k(out: &mut [f32]) {} }));
    assert_has(&plain, r#"pub fn spec() -> ::weft::host::jit::KernelSpec"#);
    assert_has(&plain, r#"entry_point: ENTRY_POINTS[0]"#);
    assert_has(&plain, r#"::weft::host::jit::function_in(ctx, &spec(), alignment, __WEFT_CHECKED_FORM)"#);
}
