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
            "auto rs_a = 1.0f;",
            "auto rs_b = 2.5;",
            "auto rs_c = 3u;",
            "auto rs_d = 4ll;",
            "auto rs_e = 5ull;",
            "auto rs_f = size_t(6);",
            "auto rs_g = int8_t(7);",
            "auto rs_h = 1e-3f;",
            "auto rs_i = 16u;",
            "auto rs_j = true;",
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
    assert_lines(&b, &["uint64_t rs_count = 0ull;", "float rs_acc = 0.0f;"]);
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
            "rs_T rs_scale = rs_T(0.5);",
            "rs_out[size_t(0)] = (rs_x[size_t(0)] * rs_scale) + rs_T(1.0);",
            "rs_out[size_t(1)] = weft::max(rs_x[size_t(1)], rs_T(0.0));",
            "rs_out[size_t(2)] = (rs_x[size_t(2)] > rs_T(2.0)) ? rs_x[size_t(2)] : rs_T(3.5);",
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
            "uint16_t rs_a = uint16_t(1);",
            "uint16_t rs_b = static_cast<uint16_t>(rs_a + uint16_t(2));",
            "uint16_t rs_c = static_cast<uint16_t>(rs_b * rs_a);",
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
        &[
            "int32_t rs_n = 10;",
            "double rs_f = 1.5;",
            "int32_t rs_i = 0;",
            "while (rs_i < rs_n) {",
            "double rs_g = rs_f * 2.0;",
        ],
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
            "auto rs_gin = rs_dev.gin(0u);",
            "uint32_t rs_signal = 3u;",
            "rs_gin.wait_signal(weft::Cta{}, rs_signal, 1ull);",
            "auto rs_v = weft::min(rs_out[size_t(0)], 7ull);",
            "auto rs_lane = weft::shfl(rs_out[size_t(1)], 0u);",
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
    assert_lines(&b, &["auto rs_n = weft::rs_helper(rs_w);", "decltype(rs_n) rs_i = decltype(rs_n)(0);"]);
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
            "weft_tuple2<uint64_t, float> rs_t = weft_make_tuple(1ull, 2.0f);",
            "uint8_t rs_a = uint8_t(3);",
            "double rs_b = 4.0;",
        ],
    );
}
