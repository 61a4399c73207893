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
            "if (a == 0u) {",
            "out[size_t(0)] = 1u;",
            "} else if (a == 1u) {",
            "out[size_t(0)] = 2u;",
            "} else {",
            "out[size_t(0)] = 3u;",
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
            "auto x = (a > 2u) ? a : 2u;",
            "auto y = (a > 2u) ? ({ auto t = a * 3u; t + 1u; }) : 0u;",
            "uint32_t z;",
            "if (a > 2u) {",
            "auto t = a * 3u;",
            "z = t + 1u;",
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
            "auto x = ({ auto s = a + 1u; s * s; });",
            "auto y = a;",
            "{",
            "auto inner = x + y;",
            "out[size_t(0)] = inner;",
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
            "uint32_t i = 0u;",
            "while (i < n) {",
            "i += 1u;",
            "if (i == 3u) {",
            "continue;",
            "}",
            "if (i == 7u) {",
            "break;",
            "}",
            "}",
            "while (true) {",
            "i -= 1u;",
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
            "for (uint32_t i = 0u; i < n; ++i) {",
            "out[static_cast<size_t>(i)] = i;",
            "}",
            // `a..=b` stops at `b` even at the type's maximum; `continue` must reach that check.
            "for (uint32_t j = 1u; j <= n; ++j) {",
            "{",
            "if (j == 2u) {",
            "goto loop1_next;",
            "}",
            "out[size_t(0)] += j;",
            "}",
            "loop1_next:;",
            "if (j == n) break;",
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
            "for (uint32_t i = 0u; i < n; i += size_t(4)) {",
            "out[size_t(0)] += i;",
            "}",
            "for (uint32_t i = n; i > 0u; ) {",
            "--i;",
            "out[size_t(1)] += i;",
            "}",
            "for (uint32_t i = 2u; i < n; i += s) {",
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
            "for (uint32_t p = 0u, p_end = dev.lsa_size(); p < p_end; ++p) {",
            // `n` changes in the body: Rust's range saw its first value.
            "for (uint32_t i = 0u, i_end = n; i < i_end; ++i) {",
            "for (size_t i = size_t(0), i_end_1 = out.len(); i < i_end_1; ++i) {",
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
            "auto i_end = weft::helper(w);",
            "for (decltype(i_end) i = 0; i < i_end; ++i) {",
            "out[size_t(0)] += 1u;",
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
    assert_lines(&b, &["for (uint32_t i_it = 0u; i_it < n; ++i_it) {", "uint32_t i = i_it;", "i *= 2u;"]);
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
            "for (size_t i = weft::index_1d(); i < n; i += weft::grid_size_1d()) {",
            "out[i] = x[i];",
            "}",
            "for (size_t i = weft::index_1d(), i_end = x.len(); i < i_end; i += weft::grid_size_1d()) {",
            "out[i] += 1.0f;",
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
            "for (uint32_t i = 0u; i < 4u; ++i) {",
            "{",
            "for (uint32_t j = 0u; j < 4u; ++j) {",
            "if (j > i) {",
            "goto rows_continue;",
            "}",
            "if ((i * j) > 6u) {",
            "goto rows_break;",
            "}",
            "}",
            "}",
            "rows_continue:;",
            "}",
            "rows_break:;",
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
            "auto matched = a % 8u;",
            "if (matched == 0u) {",
            "out[size_t(0)] = 1u;",
            "} else if ((matched == 1u || matched == 2u)) {",
            "out[size_t(0)] = 2u;",
            "} else if ((matched >= 3u && matched <= 5u)) {",
            "out[size_t(0)] = 3u;",
            "} else if (matched > 6u) {",
            "out[size_t(0)] = matched;",
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
            "uint32_t code = (r == weft::BarrierResult::Ok) ? 0u : (r == weft::BarrierResult::TimedOut) ? 1u : 2u;",
            "out[size_t(0)] = code;",
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
    assert_lines(&b, &["auto i = weft::index_1d();", "if (i >= n) {", "return;", "}", "out[i] = 1u;"]);
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
            "if (a > b) {",
            "auto d = a - b;",
            "return d * 2u;",
            "} else if (a == b) {",
            "return 0u;",
            "} else {",
            "{",
            "auto matched = b % 2u;",
            "if (matched == 0u) {",
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
            "uint32_t x;",
            "if (a > 2u) {",
            "x = a * 2u;",
            "} else {",
            "return;",
            "}",
            "for (uint32_t i = 0u; i < a; ++i) {",
            "uint32_t y;",
            "{",
            "auto matched = i % 3u;",
            "if (matched == 0u) {",
            "continue;",
            "} else if (matched == 1u) {",
            "y = i;",
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
    assert_lines(&b, &["if (a == 0u) {", "out[size_t(0)] = 1u;", "} else {", "out[size_t(0)] = a;", "}"]);
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
    assert!(unrolled[0].starts_with("while (i < gemm.len())"), "{unrolled:?}");
    assert!(unrolled[1].starts_with("for (") && unrolled[1].contains("gemm.len()"), "{unrolled:?}");
}
