//! Every rejection: spanned on the offending node, naming what to write instead, all reported at once.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_one_error, device_fn_errors, kernel_errors};
use crate::codegen::ast::FnKind;
use crate::codegen::ctxt::Ctxt;

/// The single error a kernel body with `stmt` in it produces.
#[track_caller]
fn body_error(stmt: TokenStream, fragment: &str) {
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(out: &mut [u32], n: u32) {
                #stmt
            }
        },
    );
    assert_one_error(&errors, fragment);
}

#[test]
fn closures() {
    body_error(
        quote!(let f = |x: u32| x + 1;),
        "closures are not supported in kernels: write the helper as a #[weft::device_fn]",
    );
}

#[test]
fn macros_name_the_replacement() {
    body_error(quote!(panic!("no");), "`panic!` is not supported in kernels: there is no panicking on the GPU");
    body_error(quote!(assert!(n > 0);), "`assert!` is not supported in kernels: there is no panicking on the GPU");
    body_error(quote!(println!("{}", n);), "kernels cannot print: write the values to an output slice");
    body_error(quote!(let v = vec![1, 2];), "`vec!` is not supported in kernels: kernels cannot allocate");
    body_error(quote!(let v = my_macro!(n);), "macros are not supported in kernels");
}

#[test]
fn heap_and_host_types() {
    body_error(quote!(let v: Vec<u32> = make();), "`Vec` cannot be used in a kernel: kernels cannot allocate");
    body_error(quote!(let b = Box::new(1u32);), "`Box::new` cannot be used in a kernel: kernels cannot allocate");
    body_error(quote!(let s: String = make();), "`String` cannot be used in a kernel: kernels have no strings");
    body_error(quote!(let o = Some(3u32);), "kernels have no `Option`/`Result`");
    // Both problems, at once: the host-only method and the `Option` it returns.
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(out: &mut [u32], n: u32) {
                let x = n.checked_add(1).unwrap();
            }
        },
    );
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].contains("`.unwrap()`: kernels have no `Option`/`Result`"), "{errors:#?}");
    assert!(errors[1].contains("`checked_add` is not a method of weft's kernel vocabulary"), "{errors:#?}");
}

#[test]
fn strings_and_chars() {
    body_error(quote!(let s = "text";), "kernels have no strings: pass numbers");
    body_error(quote!(let c = 'a';), "kernels have no characters");
}

#[test]
fn unsafe_async_and_try() {
    body_error(
        quote!(unsafe {
            out[0] = 1;
        }),
        "`unsafe` is not supported in kernels",
    );
    body_error(quote!(let f = async { 1 };), "`async` is not supported in kernels");
    body_error(quote!(let x = get()?;), "`?` is not supported in kernels");
}

#[test]
fn statics_and_host_constants() {
    body_error(quote!(out[0] = LIMIT;), "kernels cannot read Rust constants or statics (`LIMIT`)");
    body_error(quote!(out[0] = crate::config::LIMIT;), "kernels cannot read Rust constants or statics (`LIMIT`)");
    body_error(quote!(let x = bf16::EPSILON;), "associated constants (`bf16::EPSILON`) are not available in kernels");
    body_error(quote!(let x = f32::RADIX;), "associated constants (`f32::RADIX`) are not available in kernels");
    body_error(quote!(let x = core::u32::MAX;), "the standard library is not available in kernels");
    body_error(quote!(let x = std::cmp::max(1u32, n);), "the standard library is not available in kernels");
}

#[test]
fn host_variables_are_not_visible() {
    body_error(quote!(out[0] = host_value;), "`host_value` is not a parameter or local of this function");
}

#[test]
fn arrays_structs_and_ranges() {
    body_error(quote!(let a = [1u32, 2, 3];), "arrays are not supported in kernels: use `SharedArray<T, N>`");
    body_error(quote!(let a = [0u32; 4];), "arrays are not supported in kernels");
    body_error(quote!(let t = Team { nranks: 1, rank: 0, stride: 1 };), "struct literals are not supported in kernels");
    body_error(quote!(let r = 0..n;), "ranges are only supported as the iterator of a `for` loop");
    body_error(quote!(let s = out[1..3];), "a range index is a sub-slice: write `&x[a..b]`");
    body_error(quote!(let s = &out[1..=3];), "write the sub-slice with an exclusive end");
}

#[test]
fn references_outside_calls() {
    body_error(quote!(let r = &out[0];), "references can only be passed to functions in kernels");
    body_error(quote!(let r: &u32 = get();), "references can only be parameters in kernels");
    body_error(quote!(let r = *out;), "`*` is only needed on a device fn's `&mut` parameter");
}

#[test]
fn iterators_and_for_loops() {
    body_error(quote!(for x in out.iter() {}), "`for` loops in kernels iterate over a range");
    body_error(quote!(let s = out.iter().sum();), "iterators are not supported in kernels: loop over indices");
    body_error(quote!(for (i, x) in 0..n {}), "the loop variable must be a plain name");
    body_error(quote!(let s = (0..n).step_by(2);), "`.step_by()` is only supported on the range of a `for` loop");
}

#[test]
fn patterns_and_control_flow() {
    body_error(quote!(if let 3 = n {}), "`if let` / `while let` are not supported in kernels");
    body_error(quote!(let x = loop { break 3u32; };), "`break` with a value is not supported in kernels");
    body_error(
        quote!('a: {
            out[0] = 1;
        }),
        "labeled blocks are not supported in kernels",
    );
    body_error(quote!(let Some(x) = get() else { return; };), "`let … else` is not supported in kernels");
    body_error(
        quote!(match (n, n) {
            (0, _) => {}
            _ => {}
        }),
        "this pattern is not supported in kernels",
    );
    body_error(
        quote!(match n {
            x @ 1..=3 => {}
            _ => {}
        }),
        "`@` patterns are not supported in kernels",
    );
    body_error(quote!(let ref r = n;), "`ref` bindings are not supported in kernels");
    body_error(quote!((out[0], out[1]) = (1, 2);), "destructuring assignment is not supported in kernels");
}

#[test]
fn items_inside_bodies() {
    body_error(
        quote!(
            fn inner() {}
        ),
        "items inside a kernel body are not supported",
    );
    body_error(
        quote!(
            const N: u32 = 3;
        ),
        "items inside a kernel body are not supported",
    );
    assert!(kernel_errors(
        TokenStream::new(),
        quote!(
            fn k(out: &mut [u32]) {
                use weft::prelude::*;
                out[0] = 1;
            }
        )
    )
    .is_empty());
}

#[test]
fn calls_of_values_and_recursion() {
    body_error(quote!(let x = (get_fn())(3);), "only named functions can be called in kernels");
    body_error(quote!(k(out, n);), "recursion is not supported in kernels and device fns: write it as a loop");
    let errors = device_fn_errors(
        TokenStream::new(),
        quote! { fn fact(n: u32) -> u32 { if n == 0 { 1 } else { n * fact(n - 1) } } },
    );
    assert_one_error(&errors, "recursion is not supported");
}

#[test]
fn unannotated_let_without_value() {
    body_error(quote!(let x;), "give `x` a type or an initial value: `let x: u32;`");
}

#[test]
fn signature_errors() {
    let e = kernel_errors(quote!(), quote! { async fn k(out: &mut [u32]) {} });
    assert_one_error(&e, "kernels cannot be `async`");
    let e = kernel_errors(quote!(), quote! { unsafe fn k(out: &mut [u32]) {} });
    assert_one_error(&e, "`unsafe` is not supported in kernels");
    let e = kernel_errors(quote!(), quote! { fn k(out: &mut [u32]) -> u32 { 1 } });
    assert_one_error(&e, "kernels return nothing: write results into a `&mut [T]` parameter or a window");
    let e = kernel_errors(quote!(), quote! { fn k(v: Vec<u32>) {} });
    assert_one_error(&e, "`Vec` cannot be used in a kernel");
    let e = kernel_errors(quote!(), quote! { fn k(x: &u32) {} });
    assert_one_error(
        &e,
        "kernel parameters are `&DevComm<C>`, `&Window<T>`, `&[T]`, `&mut [T]`, `LlA2aHandle`, `TmaMatrix<T>`, \
         `TmaShards<T>` or scalars",
    );
    // `gemm_tiles` hands registers between warpgroups: its kernels must be compiled for 384 threads, one block per SM.
    let e = kernel_errors(
        quote!(),
        quote! {
            fn k(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f32]) {
                let mut g = a.gemm_tiles(&b);
                while g.next_tile() { out[g.row0()] = g.value(0); }
            }
        },
    );
    assert_one_error(&e, "declare `#[weft::kernel(launch_bounds(384, 1))]`");
    // A `TmaMatrix` and the loop state stay where they are: TMA reads the map where the launch put it.
    let e = kernel_errors(
        quote!(launch_bounds(384, 1)),
        quote! {
            fn k(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f32]) {
                let copy = a;
                let mut g = copy.gemm_tiles(&b);
                while g.next_tile() { out[g.row0()] = g.value(0); }
            }
        },
    );
    assert_one_error(&e, "`a` is a `TmaMatrix`, which cannot be copied or moved (TMA reads its tensor map");
    let e = kernel_errors(
        quote!(launch_bounds(384, 1)),
        quote! {
            fn k(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f32]) {
                let mut g = a.gemm_tiles(&b);
                let h = g;
                out[0] = h.value(0);
            }
        },
    );
    assert_one_error(&e, "`g` is a `GemmTiles`, which cannot be copied or moved");
    let e = device_fn_errors(quote!(), quote! { fn f(a: TmaMatrix<bf16>) -> usize { a.rows() } });
    assert_one_error(&e, "a `TmaMatrix` cannot be passed by value (TMA reads its tensor map");
    // So do a `TmaShards`' maps.
    let e = kernel_errors(
        quote!(launch_bounds(384, 1)),
        quote! {
            fn k(x: TmaShards<bf16>, b: TmaMatrix<bf16>, out: &mut [f32]) {
                let moved = x;
                let mut g = moved.gemm_tiles(&b);
                while g.next_tile() { out[g.row0()] = g.value(0); }
            }
        },
    );
    assert_one_error(&e, "`x` is a `TmaShards`, which cannot be copied or moved (TMA reads its tensor map");
    let e = device_fn_errors(quote!(), quote! { fn f(x: TmaShards<bf16>) -> usize { x.shard_rows() } });
    assert_one_error(&e, "a `TmaShards` cannot be passed by value (TMA reads its tensor map");
    let e = kernel_errors(quote!(), quote! { fn k((a, b): (u32, u32)) {} });
    assert_one_error(&e, "parameters must be plain names");
    let e = kernel_errors(quote!(), quote! { fn k<const N: usize>(x: &[u32]) {} });
    assert_one_error(&e, "const generics are not supported in kernels");
    let e = kernel_errors(quote!(), quote! { fn k(a: &DevComm<Lsa>, b: &DevComm<Gin>) {} });
    assert_one_error(&e, "a kernel takes at most one `&DevComm<C>`");
    let e = kernel_errors(quote!(), quote! { fn k(a: &DevComm<Everything>) {} });
    assert_one_error(&e, "expected a capability set (`Lsa`, `Gin`, `Multimem`, `LsaGin`");
    let e = kernel_errors(quote!(), quote! { fn k(p: *const f32) {} });
    assert_one_error(&e, "raw pointers are not supported in kernels");
    let e = kernel_errors(quote!(), quote! { fn k(f: impl Fn(u32) -> u32) {} });
    assert_one_error(&e, "trait objects and `impl Trait` are not supported in kernels");
    let e = kernel_errors(quote!(), quote! { fn k(a: [u32; 4]) {} });
    assert_one_error(&e, "arrays are not supported in kernels");
}

#[test]
fn element_type_instantiation_errors() {
    let e = kernel_errors(quote!(), quote! { fn k<T: MyTrait>(x: &mut [T]) {} });
    assert_one_error(&e, "say which types to instantiate `T` for: `#[kernel(types(f32, bf16))]`");
    let e = kernel_errors(quote!(types(f32, u128)), quote! { fn k<T: Element>(x: &mut [T]) {} });
    assert_one_error(&e, "`u128` is not an element type");
    let e = kernel_errors(quote!(types(f32, f32)), quote! { fn k<T: Element>(x: &mut [T]) {} });
    assert_one_error(&e, "`f32` is listed twice");
    let e = kernel_errors(quote!(types(f32)), quote! { fn k<T: Float, I: Element>(x: &mut [T], i: &[I]) {} });
    assert_one_error(&e, "with several type parameters, name each list");
    let e = kernel_errors(quote!(types(U = [f32])), quote! { fn k<T: Float>(x: &mut [T]) {} });
    assert_one_error(&e, "`U` is not an element type parameter of this kernel");
    let e = kernel_errors(quote!(types(f32)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "this kernel has no element type parameter to instantiate");
}

#[test]
fn attribute_errors() {
    let e = kernel_errors(quote!(fast), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "unknown argument `fast`");
    let e = kernel_errors(quote!(lsa_barriers = many), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "expected a count or `grid`");
    let e = kernel_errors(quote!(len(x == y)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "`y` is not a parameter of this kernel");
    let e = kernel_errors(quote!(len(x == a)), quote! { fn k(x: &mut [f32], a: f32) {} });
    assert_one_error(&e, "`a` has no length");
    let e = device_fn_errors(quote!(types(f32)), quote! { fn h(x: f32) -> f32 { x } });
    assert_one_error(&e, "unknown argument `types`");
    let e = kernel_errors(quote!(launch_bounds(2048)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "2048 threads per block: CUDA allows 1 to 1024");
    let e = kernel_errors(quote!(launch_bounds(0)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "0 threads per block");
    let e = kernel_errors(quote!(launch_bounds(256, 0)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "at least 1 block per SM");
    let e = kernel_errors(quote!(launch_bounds(256, 2, 1)), quote! { fn k(x: &mut [f32]) {} });
    assert_one_error(&e, "write `launch_bounds(max_threads)` or `launch_bounds(max_threads, min_blocks_per_sm)`");
    let e = device_fn_errors(quote!(launch_bounds(256)), quote! { fn h(x: f32) -> f32 { x } });
    assert_one_error(&e, "unknown argument `launch_bounds`");
    let e = kernel_errors(
        quote!(fast, types(f32, f32), lsa_barriers = x, debug),
        quote! { fn k<T: Float>(x: &mut [T]) {} },
    );
    assert_eq!(e.len(), 3, "every bad argument is reported: {e:#?}");
}

#[test]
fn all_errors_of_a_kernel_are_reported_together() {
    let errors = kernel_errors(
        quote!(),
        quote! {
            fn k(out: &mut [u32], v: Vec<u32>) {
                let f = |x: u32| x;
                println!("hi");
                let s = "text";
                out[0] = LIMIT;
            }
        },
    );
    assert_eq!(errors.len(), 5, "{errors:#?}");
}

#[test]
fn errors_are_spanned_on_the_offending_node() {
    let src = "fn k(out: &mut [u32]) {\n    out[0] = 1;\n    let f = |x: u32| x;\n}";
    let item: syn::ItemFn = syn::parse_str(src).unwrap();
    let cx = Ctxt::new();
    let _ = crate::codegen::analyze(FnKind::Kernel, TokenStream::new(), &item, super::OPTIONS, &cx);
    let errors = cx.into_errors();
    assert_eq!(errors.len(), 1);
    let start = errors[0].span().start();
    assert_eq!((start.line, start.column), (3, 12), "the closure, not the statement or the function");
}

#[test]
fn the_users_function_survives_errors() {
    let out = crate::codegen::expand_kernel(
        quote!(),
        quote! {
            fn k(out: &mut [u32]) {
                let f = |x: u32| x;
            }
        },
    )
    .to_string();
    assert!(out.contains("compile_error"), "{out}");
    assert!(out.contains("fn k"), "{out}");
    assert!(out.contains("mod k"), "the generated module is still emitted, so uses of it do not cascade: {out}");
}
