//! The C++ of control flow: `if`, blocks and `match` as values, loops, labels, returns.

use quote::quote;

use super::{assert_lines, body, device_fn_body};

#[test]
fn if_else_chains() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            if a == 0 {
                out[0] = 1;
            } else if a == 1 {
                out[0] = 2;
            } else {
                out[0] = 3;
            }
        }
    });
    assert_lines(
        &b,
        &[
            "if (rs_a == 0u) {",
            "rs_out[size_t(0)] = 1u;",
            "} else if (rs_a == 1u) {",
            "rs_out[size_t(0)] = 2u;",
            "} else {",
            "rs_out[size_t(0)] = 3u;",
            "}",
        ],
    );
}

#[test]
fn if_expressions_become_ternaries_or_statement_expressions() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            let x = if a > 2 { a } else { 2 };
            let y = if a > 2 { let t = a * 3; t + 1 } else { 0 };
            let z: u32 = if a > 2 { let t = a * 3; t + 1 } else { return; };
            out[0] = x + y + z;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_x = (rs_a > 2u) ? rs_a : 2u;",
            "auto rs_y = (rs_a > 2u) ? ({ auto rs_t = rs_a * 3u; rs_t + 1u; }) : 0u;",
            "uint32_t rs_z;",
            "if (rs_a > 2u) {",
            "auto rs_t = rs_a * 3u;",
            "rs_z = rs_t + 1u;",
            "} else {",
            "return;",
            "}",
        ],
    );
}

#[test]
fn blocks_as_expressions() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            let x = { let s = a + 1; s * s };
            let y = { a };
            {
                let inner = x + y;
                out[0] = inner;
            }
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_x = ({ auto rs_s = rs_a + 1u; rs_s * rs_s; });",
            "auto rs_y = rs_a;",
            "{",
            "auto rs_inner = rs_x + rs_y;",
            "rs_out[size_t(0)] = rs_inner;",
            "}",
        ],
    );
}

#[test]
fn while_loop_break_continue() {
    let b = body(quote! {
        fn k(out: &mut [u32], n: u32) {
            let mut i: u32 = 0;
            while i < n {
                i += 1;
                if i == 3 { continue; }
                if i == 7 { break; }
            }
            loop {
                i -= 1;
                if i == 0 { break; }
            }
        }
    });
    assert_lines(
        &b,
        &[
            "uint32_t rs_i = 0u;",
            "while (rs_i < rs_n) {",
            "rs_i += 1u;",
            "if (rs_i == 3u) {",
            "continue;",
            "}",
            "if (rs_i == 7u) {",
            "break;",
            "}",
            "}",
            "while (true) {",
            "rs_i -= 1u;",
            "}",
        ],
    );
}

#[test]
fn half_open_and_inclusive_ranges() {
    let b = body(quote! {
        fn k(out: &mut [u32], n: u32) {
            for i in 0..n { out[i as usize] = i; }
            for j in 1..=n { if j == 2 { continue; } out[0] += j; }
        }
    });
    assert_lines(
        &b,
        &[
            "for (uint32_t rs_i = 0u; rs_i < rs_n; ++rs_i) {",
            "rs_out[static_cast<size_t>(rs_i)] = rs_i;",
            "}",
            // `a..=b` stops at `b` even at the type's maximum; `continue` must reach that check.
            "for (uint32_t rs_j = 1u; rs_j <= rs_n; ++rs_j) {",
            "{",
            "if (rs_j == 2u) {",
            "goto w_loop1_next;",
            "}",
            "rs_out[size_t(0)] += rs_j;",
            "}",
            "w_loop1_next:;",
            "if (rs_j == rs_n) break;",
            "}",
        ],
    );
}

#[test]
fn step_by_and_rev() {
    let b = body(quote! {
        fn k(out: &mut [u32], n: u32, s: usize) {
            for i in (0..n).step_by(4) { out[0] += i; }
            for i in (0..n).rev() { out[1] += i; }
            for i in (2..n).step_by(s) { out[2] += i; }
        }
    });
    assert_lines(
        &b,
        &[
            "for (uint32_t rs_i = 0u; rs_i < rs_n; rs_i += size_t(4)) {",
            "rs_out[size_t(0)] += rs_i;",
            "}",
            "for (uint32_t rs_i = rs_n; rs_i > 0u; ) {",
            "--rs_i;",
            "rs_out[size_t(1)] += rs_i;",
            "}",
            "for (uint32_t rs_i = 2u; rs_i < rs_n; rs_i += rs_s) {",
        ],
    );
}

#[test]
fn loop_bounds_are_evaluated_once() {
    let b = body(quote! {
        fn k(dev: &DevComm<Lsa>, out: &mut [u32], mut n: u32) {
            for p in 0..dev.lsa_size() { out[0] += p; }
            for i in 0..n { n -= 1; out[1] += i; }
            for i in 0..out.len() { out[i] = 0; }
        }
    });
    assert_lines(
        &b,
        &[
            "for (uint32_t rs_p = 0u, w_p_end = rs_dev.lsa_size(); rs_p < w_p_end; ++rs_p) {",
            // `n` changes in the body: Rust's range saw its first value.
            "for (uint32_t rs_i = 0u, w_i_end = rs_n; rs_i < w_i_end; ++rs_i) {",
            "for (size_t rs_i = size_t(0), w_i_end_1 = rs_out.len(); rs_i < w_i_end_1; ++rs_i) {",
        ],
    );
}

#[test]
fn loop_bound_of_unknown_type_is_hoisted() {
    let b = body(quote! {
        fn k(out: &mut [u32], w: &Window<u32>) {
            for i in 0..helper(w) { out[0] += 1; }
        }
    });
    assert_lines(
        &b,
        &[
            "{",
            "auto w_i_end = weft::rs_helper(rs_w);",
            "for (decltype(w_i_end) rs_i = 0; rs_i < w_i_end; ++rs_i) {",
            "rs_out[size_t(0)] += 1u;",
            "}",
            "}",
        ],
    );
}

#[test]
fn mutable_loop_variable_is_a_copy() {
    let b = body(quote! {
        fn k(out: &mut [u32], n: u32) {
            for mut i in 0..n { i *= 2; out[0] += i; }
        }
    });
    assert_lines(
        &b,
        &["for (uint32_t w_i_it = 0u; w_i_it < rs_n; ++w_i_it) {", "uint32_t rs_i = w_i_it;", "rs_i *= 2u;"],
    );
}

#[test]
fn grid_stride_loop() {
    let b = body(quote! {
        fn k(x: &[f32], out: &mut [f32], n: usize) {
            for i in grid_stride(n) { out[i] = x[i]; }
            for i in grid_stride(x.len()) { out[i] += 1.0; }
        }
    });
    assert_lines(
        &b,
        &[
            "for (size_t rs_i = weft::index_1d(); rs_i < rs_n; rs_i += weft::grid_size_1d()) {",
            "rs_out[rs_i] = rs_x[rs_i];",
            "}",
            "for (size_t rs_i = weft::index_1d(), w_i_end = rs_x.len(); rs_i < w_i_end; rs_i += weft::grid_size_1d()) {",
            "rs_out[rs_i] += 1.0f;",
        ],
    );
}

#[test]
fn labeled_break_and_continue_become_gotos() {
    let b = body(quote! {
        fn k(out: &mut [u32]) {
            'rows: for i in 0..4u32 {
                for j in 0..4u32 {
                    if j > i { continue 'rows; }
                    if i * j > 6 { break 'rows; }
                    out[0] += 1;
                }
            }
        }
    });
    assert_lines(
        &b,
        &[
            "for (uint32_t rs_i = 0u; rs_i < 4u; ++rs_i) {",
            "{",
            "for (uint32_t rs_j = 0u; rs_j < 4u; ++rs_j) {",
            "if (rs_j > rs_i) {",
            "goto w_rows_continue;",
            "}",
            "if ((rs_i * rs_j) > 6u) {",
            "goto w_rows_break;",
            "}",
            "}",
            "}",
            "w_rows_continue:;",
            "}",
            "w_rows_break:;",
        ],
    );
}

#[test]
fn match_statements_become_if_chains() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            match a % 8 {
                0 => out[0] = 1,
                1 | 2 => { out[0] = 2; }
                3..=5 => out[0] = 3,
                n if n > 6 => out[0] = n,
                _ => {}
            }
        }
    });
    assert_lines(
        &b,
        &[
            "{",
            "auto w_matched = rs_a % 8u;",
            "if (w_matched == 0u) {",
            "rs_out[size_t(0)] = 1u;",
            "} else if ((w_matched == 1u || w_matched == 2u)) {",
            "rs_out[size_t(0)] = 2u;",
            "} else if ((w_matched >= 3u && w_matched <= 5u)) {",
            "rs_out[size_t(0)] = 3u;",
            "} else if (w_matched > 6u) {",
            "rs_out[size_t(0)] = w_matched;",
            "} else {",
            "}",
            "}",
        ],
    );
}

#[test]
fn match_on_enums_and_as_a_value() {
    let b = body(quote! {
        fn k(out: &mut [u32], dev: &DevComm<Lsa>) {
            let r = dev.lsa_barrier(Cta, 0).sync_timeout(Cta, Order::Relaxed, 10);
            let code = match r {
                BarrierResult::Ok => 0,
                BarrierResult::TimedOut => 1,
                _ => 2,
            };
            out[0] = code;
        }
    });
    assert_lines(
        &b,
        &[
            // `code` flows into a `u32` slice: its literals are `u32`.
            "uint32_t rs_code = (rs_r == weft::BarrierResult::Ok) ? 0u : (rs_r == weft::BarrierResult::TimedOut) ? 1u : 2u;",
            "rs_out[size_t(0)] = rs_code;",
        ],
    );
}

#[test]
fn early_return() {
    let b = body(quote! {
        fn k(out: &mut [u32], n: usize) {
            let i = index_1d();
            if i >= n { return; }
            out[i] = 1;
        }
    });
    assert_lines(&b, &["auto rs_i = weft::index_1d();", "if (rs_i >= rs_n) {", "return;", "}", "rs_out[rs_i] = 1u;"]);
}

#[test]
fn device_fn_results_are_returned_from_every_branch() {
    let b = device_fn_body(quote! {
        fn pick(a: u32, b: u32) -> u32 {
            if a > b {
                let d = a - b;
                d * 2
            } else if a == b {
                0
            } else {
                match b % 2 { 0 => 1, _ => 2 }
            }
        }
    });
    assert_lines(
        &b,
        &[
            "if (rs_a > rs_b) {",
            "auto rs_d = rs_a - rs_b;",
            "return rs_d * 2u;",
            "} else if (rs_a == rs_b) {",
            "return 0u;",
            "} else {",
            "{",
            "auto w_matched = rs_b % 2u;",
            "if (w_matched == 0u) {",
            "return 1u;",
            "} else {",
            "return 2u;",
        ],
    );
}

#[test]
fn a_value_whose_branch_leaves_is_declared_then_assigned() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            let x = if a > 2 { a * 2 } else { return; };
            for i in 0..a {
                let y = match i % 3 { 0 => continue, 1 => i, _ => break };
                out[0] += x + y;
            }
        }
    });
    assert_lines(
        &b,
        &[
            "uint32_t rs_x;",
            "if (rs_a > 2u) {",
            "rs_x = rs_a * 2u;",
            "} else {",
            "return;",
            "}",
            "for (uint32_t rs_i = 0u; rs_i < rs_a; ++rs_i) {",
            "uint32_t rs_y;",
            "{",
            "auto w_matched = rs_i % 3u;",
            "if (w_matched == 0u) {",
            "continue;",
            "} else if (w_matched == 1u) {",
            "rs_y = rs_i;",
            "} else {",
            "break;",
            "}",
            "}",
        ],
    );
}

#[test]
fn a_leaving_branch_with_values_of_unknown_type_needs_an_annotation() {
    let errors = super::kernel_errors(
        proc_macro2::TokenStream::new(),
        quote! {
            fn k(w: &Window<f32>, flag: bool) {
                let v = if flag { helper(w) } else { return; };
            }
        },
    );
    super::assert_one_error(&errors, "cannot tell the C++ type of `v`: a branch of its value leaves");
}

#[test]
fn an_arm_that_always_matches_ends_the_chain() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32) {
            match a {
                0 => out[0] = 1,
                n => out[0] = n,
                _ => out[0] = 3,
            }
        }
    });
    assert_lines(&b, &["if (rs_a == 0u) {", "rs_out[size_t(0)] = 1u;", "} else {", "rs_out[size_t(0)] = rs_a;", "}"]);
    assert!(!b.iter().any(|l| l.contains("= 3u")), "{b:#?}");
}

/// A loop over a thread's GEMM tile values (`i < tile.len()`, `0..gemm.len()`) is emitted under `#pragma unroll`, so
/// that every `value(i)` has a constant index and the accumulator stays in registers; other loops are left to nvcc.
#[test]
fn loops_over_tile_values_are_unrolled() {
    let k = super::kernel_analysis(
        quote!(launch_bounds(384, 1)),
        quote! {
            fn k(a: TmaMatrix<bf16>, b: TmaMatrix<bf16>, out: &mut [f32], n: usize) {
                let mut gemm = a.gemm_tiles(&b);
                while gemm.next_tile() {
                    let mut i = 0;
                    while i < gemm.len() {
                        out[gemm.row(i)] = gemm.value(i);
                        i += 1;
                    }
                    for j in 0..gemm.len() {
                        out[gemm.col(j)] = gemm.value(j);
                    }
                    for j in 0..n {
                        out[j] = 0.0;
                    }
                }
            }
        },
    );
    let b = super::lines(&k.lowered.text);
    let unrolled: Vec<&str> =
        b.windows(2).filter(|w| w[0] == "#pragma unroll").map(|w| w[1].split(" //").next().unwrap_or(&w[1])).collect();
    assert_eq!(unrolled.len(), 2, "{}", b.join("\n"));
    assert!(unrolled[0].starts_with("while (rs_i < rs_gemm.len())"), "{unrolled:?}");
    assert!(unrolled[1].starts_with("for (") && unrolled[1].contains("rs_gemm.len()"), "{unrolled:?}");
}
