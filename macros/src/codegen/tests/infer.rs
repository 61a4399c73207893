//! Typing of untyped literals: what rustc infers from later uses, the C++ must spell.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_lines, assert_one_error, body, kernel_errors};

#[test]
fn suffixed_literals_map_to_cpp_literals() {
    let b = body(quote! {
        fn k(out: &mut [u32]) {
            let a = 1.0f32;
            let b = 2.5f64;
            let c = 3u32;
            let d = 4i64;
            let e = 5u64;
            let f = 6usize;
            let g = 7i8;
            let h = 1e-3f32;
            let i = 0x10u32;
            let j = true;
        }
    });
    assert_lines(
        &b,
        &[
            "auto a = 1.0f;",
            "auto b = 2.5;",
            "auto c = 3u;",
            "auto d = 4ll;",
            "auto e = 5ull;",
            "auto f = size_t(6);",
            "auto g = int8_t(7);",
            "auto h = 1e-3f;",
            "auto i = 16u;",
            "auto j = true;",
        ],
    );
}

#[test]
fn an_untyped_literal_takes_the_type_of_a_later_use() {
    let b = body(quote! {
        fn k(out: &mut [u64], x: &[f32]) {
            let mut count = 0;
            let mut acc = 0.0;
            for i in 0..x.len() {
                acc += x[i];
                count += 1;
            }
            out[0] = count;
        }
    });
    assert_lines(&b, &["uint64_t count = 0ull;", "float acc = 0.0f;"]);
}

#[test]
fn untyped_floats_in_generic_kernels_become_t_of_the_value() {
    let b = body(quote! {
        fn k<T: Float>(x: &[T], out: &mut [T]) {
            let scale = 0.5;
            out[0] = x[0] * scale + 1.0;
            out[1] = x[1].max(0.0);
            out[2] = if x[2] > 2.0 { x[2] } else { 3.5 };
        }
    });
    assert_lines(
        &b,
        &[
            "T scale = T(0.5);",
            "out[size_t(0)] = (x[size_t(0)] * scale) + T(1.0);",
            "out[size_t(1)] = weft::max(x[size_t(1)], T(0.0));",
            "out[size_t(2)] = (x[size_t(2)] > T(2.0)) ? x[size_t(2)] : T(3.5);",
        ],
    );
}

#[test]
fn literals_chain_through_locals() {
    let b = body(quote! {
        fn k(out: &mut [u16]) {
            let a = 1;
            let b = a + 2;
            let c = b * a;
            out[0] = c;
        }
    });
    assert_lines(
        &b,
        &[
            "uint16_t a = uint16_t(1);",
            "uint16_t b = static_cast<uint16_t>(a + uint16_t(2));",
            "uint16_t c = static_cast<uint16_t>(b * a);",
        ],
    );
}

#[test]
fn rust_fallback_types_when_nothing_constrains_a_literal() {
    let b = body(quote! {
        fn k(out: &mut [u32]) {
            let n = 10;
            let f = 1.5;
            let mut i = 0;
            while i < n { i += 1; }
            let g = f * 2.0;
        }
    });
    assert_lines(
        &b,
        &["int32_t n = 10;", "double f = 1.5;", "int32_t i = 0;", "while (i < n) {", "double g = f * 2.0;"],
    );
}

#[test]
fn vocabulary_signatures_type_literals() {
    let b = body(quote! {
        fn k(dev: &DevComm<Gin>, out: &mut [u64]) {
            let gin = dev.gin(0);
            let signal = 3;
            gin.wait_signal(Cta, signal, 1);
            let v = min(out[0], 7);
            let lane = shfl(out[1], 0);
        }
    });
    assert_lines(
        &b,
        &[
            "auto gin = dev.gin(0u);",
            "uint32_t signal = 3u;",
            "gin.wait_signal(weft::Cta{}, signal, 1ull);",
            "auto v = weft::min(out[size_t(0)], 7ull);",
            "auto lane = weft::shfl(out[size_t(1)], 0u);",
        ],
    );
}

#[test]
fn a_literal_local_used_only_by_unknown_vocabulary_is_an_error() {
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(w: &Window<f32>) {
                let mut acc = 0.0;
                acc += helper(w);
            }
        },
    );
    assert_one_error(&errors, "cannot tell the C++ type of `acc`");
    assert!(errors[0].contains("let acc: f32 = 0.0;"), "{}", errors[0]);
}

#[test]
fn a_local_of_unknown_type_names_its_type_with_decltype() {
    let b = body(quote! {
        fn k(w: &Window<f32>, out: &mut [u32]) {
            let n = helper(w);
            let mut i = 0;
            while i < n { i += 1; }
        }
    });
    assert_lines(&b, &["auto n = weft::helper(w);", "decltype(n) i = decltype(n)(0);"]);
}

#[test]
fn tuple_elements_take_the_declared_types() {
    let b = body(quote! {
        fn k(out: &mut [u32]) {
            let t: (u64, f32) = (1, 2.0);
            let (a, b): (u8, f64) = (3, 4.0);
        }
    });
    assert_lines(
        &b,
        &[
            "weft_tuple2<uint64_t, float> t = weft_make_tuple(1ull, 2.0f);",
            "uint8_t a = uint8_t(3);",
            "double b = 4.0;",
        ],
    );
}
