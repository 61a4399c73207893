//! Collectives under divergent control flow (docs/macro.md, "Collectives"): each way of making control flow differ
//! between threads, refused on the collective with the cause named; uniform control flow still accepted.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_one_error, device_fn_errors, kernel_analysis, kernel_errors};
use crate::codegen::usage::{BLOCK_COLLECTIVE_BIT, WARP_COLLECTIVE_BIT};

/// The errors of a kernel `fn k(dev, x, data, out, n)` with `body`.
fn errors(body: TokenStream) -> Vec<String> {
    kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(dev: &DevComm<Lsa>, x: &Window<f32>, data: &[u32], out: &mut [f32], n: u32) {
                #body
            }
        },
    )
}

#[track_caller]
fn refused(body: TokenStream, fragments: &[&str]) {
    let errors = errors(body);
    assert_eq!(errors.len(), 1, "expected one error, got {errors:#?}");
    for f in fragments {
        assert!(errors[0].contains(f), "`{f}` not in `{}`", errors[0]);
    }
}

#[track_caller]
fn accepted(body: TokenStream) {
    let errors = errors(body);
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn a_block_sync_under_a_thread_condition() {
    refused(
        quote! {
            let bar = dev.lsa_barrier(Cta, block_idx_x());
            if thread_idx_x() == 0 {
                bar.sync(Cta, Order::Relaxed);
            }
        },
        &[
            "`bar . sync (Cta , Order :: Relaxed)` needs every thread of the block",
            "it runs under `if thread_idx_x () == 0` (line 1), whose condition differs between threads",
            "undefined behaviour or a hang",
            "move it where every thread of the block runs",
        ],
    );
    refused(
        quote!(if data[0] > 0 {
            sync_threads();
        }),
        &["`sync_threads ()`", "`if data [0] > 0`"],
    );
    refused(
        quote! {
            let t = thread_idx_x() * 2;
            let wide = t > 5;
            if wide { sync_threads(); }
        },
        &["`if wide`"],
    );
    // A local assigned under a thread condition.
    refused(
        quote! {
            let mut go = false;
            if thread_idx_x() == 0 { go = true; }
            if go { sync_threads(); }
        },
        &["`if go`"],
    );
    refused(
        quote!(match lane_id() {
            0 => sync_threads(),
            _ => {}
        }),
        &["`match lane_id ()`"],
    );
    refused(
        quote!(if thread_idx_x() < 4 && block_reduce_sum(1.0f32) > 0.0 {
            out[0] = 1.0;
        }),
        &["`block_reduce_sum (1.0f32)`", "the left operand of `&&`"],
    );
    refused(
        quote!(if n > 0 {
            if lane_id() == 3 {
                let b = dev.lsa_barrier(Cta, 0);
            }
        }),
        &["`dev . lsa_barrier (Cta , 0)`"],
    );
}

#[test]
fn a_block_sync_after_an_early_return_some_threads_take() {
    refused(
        quote! {
            if thread_idx_x() >= n { return; }
            sync_threads();
        },
        &[
            "`sync_threads ()`",
            "the `return` at line",
            "which only some threads take (it runs under `if thread_idx_x () >= n`",
        ],
    );
    // Inside a loop: every later iteration too.
    refused(
        quote! {
            for i in 0..n {
                sync_threads();
                if data[i as usize] == 0 { return; }
            }
        },
        &["`sync_threads ()`", "(in an earlier iteration of the loop)"],
    );
    refused(
        quote! {
            loop {
                if lane_id() == 0 { break; }
                sync_warp();
            }
        },
        &["`sync_warp ()` needs every thread of the warp", "the `break` at line"],
    );
}

#[test]
fn a_block_sync_in_a_loop_whose_trip_count_depends_on_the_thread() {
    refused(
        quote!(for i in 0..thread_idx_x() {
            sync_threads();
        }),
        &["the loop `for i in 0 .. thread_idx_x ()`"],
    );
    refused(
        quote!(for i in grid_stride(n as usize) {
            sync_threads();
        }),
        &["whose trip count differs between threads"],
    );
    refused(
        quote! {
            let mut i = thread_idx_x();
            while i < n {
                sync_threads();
                i += block_dim_x();
            }
        },
        &["`while i < n`"],
    );
}

#[test]
fn a_block_sync_in_a_while_over_data() {
    refused(
        quote!(while data[0] != 0 {
            sync_threads();
        }),
        &["`while data [0] != 0`"],
    );
    refused(
        quote! {
            let mut i = 0;
            while i < n {
                sync_threads();
                i = data[i as usize];
            }
        },
        &["`while i < n`"],
    );
}

#[test]
fn an_early_exit_out_of_a_sessions_scope() {
    refused(
        quote! {
            let bar = dev.lsa_barrier(Cta, block_idx_x());
            bar.sync(Cta, Order::Relaxed);
            if thread_idx_x() == 0 { return; }
            out[0] = 1.0;
        },
        &["this `return` leaves the scope of the session `bar`", "end it with `bar.end()` first"],
    );
    // Ended first: nothing left to synchronize.
    accepted(quote! {
        let bar = dev.lsa_barrier(Cta, block_idx_x());
        bar.sync(Cta, Order::Relaxed);
        bar.end();
        if thread_idx_x() == 0 { return; }
        out[0] = 1.0;
    });
    // A sync after the exit is the one error (the exit's is the same mistake).
    refused(
        quote! {
            let bar = dev.lsa_barrier(Cta, block_idx_x());
            if thread_idx_x() == 0 { return; }
            bar.sync(Cta, Order::Relaxed);
        },
        &["`bar . sync (Cta , Order :: Relaxed)` needs every thread of the block"],
    );
}

#[test]
fn warp_collectives_need_the_warp_not_the_block() {
    refused(
        quote!(if lane_id() < 16 {
            out[0] = shfl_xor(1.0f32, 1) as f32;
        }),
        &["needs every thread of the warp"],
    );
    refused(
        quote! {
            let bar = dev.lsa_barrier(Warp, 0);
            if lane_id() == 0 { bar.sync(Warp, Order::Relaxed); }
        },
        &["needs every thread of the warp", "`if lane_id () == 0`"],
    );
    refused(
        quote!(if thread_idx_x() % 2 == 0 {
            sync_warp();
        }),
        &["`sync_warp ()`"],
    );
    // What every thread of a warp shares: launch-uniform values and the warp's index.
    accepted(quote! {
        if warp_id() == 0 {
            sync_warp();
            let all = ballot(data[0] > 0);
            if all != 0 { out[0] = warp_reduce_sum(1.0f32); }
        }
    });
    // But not a block-wide one.
    refused(
        quote!(if warp_id() == 0 {
            sync_threads();
        }),
        &["`if warp_id () == 0`"],
    );
}

#[test]
fn uniform_control_flow_is_accepted() {
    accepted(quote! {
        let bar = dev.lsa_barrier(Cta, block_idx_x());
        if block_idx_x() == 0 { bar.sync(Cta, Order::Relaxed); }
        if n > 4 && dev.lsa_size() > 1 { sync_threads(); }
        for i in 0..n { sync_threads(); }
        for p in 0..dev.lsa_size() { bar.sync(Cta, Order::Acquire); }
        let mut rounds = 0u32;
        while rounds < n {
            bar.sync(Cta, Order::AcqRel);
            rounds += 1;
        }
        let mut row = block_idx_x();
        while row < n {
            let s = block_reduce_sum(out[0]);
            if s > 0.0 { sync_threads(); }
            row += grid_dim_x();
        }
        if bar.sync_timeout(Cta, Order::AcqRel, 1000).is_ok() { bar.sync(Cta, Order::Relaxed); }
        // A thread-dependent `continue` after the sync: the next iteration starts with every thread.
        for i in 0..n {
            sync_threads();
            if thread_idx_x() > i { continue; }
            out[0] = 1.0;
        }
        // Divergence that ends where the block joins again.
        if thread_idx_x() == 0 { out[0] = 2.0; }
        for j in grid_stride(n as usize) { out[j] = 0.0; }
        loop {
            if lane_id() == 0 { break; }
        }
        sync_threads();
    });
    accepted(quote! {
        if block_idx_x() >= n { return; }
        sync_threads();
    });
}

#[test]
fn the_usage_words_carry_the_collectives() {
    let a = kernel_analysis(quote!(), quote! { fn k(out: &mut [f32]) { sync_threads(); out[0] = 1.0; } });
    assert_eq!(a.usage.encode()[1] & (BLOCK_COLLECTIVE_BIT | WARP_COLLECTIVE_BIT), BLOCK_COLLECTIVE_BIT);
    let a = kernel_analysis(quote!(), quote! { fn k(out: &mut [f32]) { out[0] = shfl_down(out[0], 1); } });
    assert_eq!(a.usage.encode()[1] & (BLOCK_COLLECTIVE_BIT | WARP_COLLECTIVE_BIT), WARP_COLLECTIVE_BIT);
    let a = kernel_analysis(quote!(), quote! { fn k(out: &mut [f32]) { out[0] = 1.0; } });
    assert_eq!(a.usage.encode()[1] & (BLOCK_COLLECTIVE_BIT | WARP_COLLECTIVE_BIT), 0);
}

#[test]
fn a_device_fns_parameters_are_not_known_to_be_uniform() {
    let errors = device_fn_errors(
        quote!(),
        quote!(
            fn rounds(n: u32) {
                for i in 0..n {
                    sync_threads();
                }
            }
        ),
    );
    assert_one_error(&errors, "`sync_threads ()` needs every thread of the block");
    // At its top level, its collectives are its callers' to place.
    assert!(device_fn_errors(
        quote!(),
        quote!(
            fn once(bar: &LsaBarrier<'_, Cta>) {
                bar.sync(Cta, Order::Relaxed);
            }
        )
    )
    .is_empty());
    // A generic coop may be the block's.
    let errors = device_fn_errors(
        quote!(),
        quote!(
            fn maybe<Co: Coop>(bar: &LsaBarrier<'_, Co>, co: Co, go: bool) {
                if go {
                    bar.sync(co, Order::Relaxed);
                }
            }
        ),
    );
    assert_one_error(&errors, "needs every thread of the block");
}

#[test]
fn a_device_fn_called_where_threads_diverge_is_checked_against_its_collectives() {
    let out: String = crate::codegen::expand_kernel(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: u32) {
                if thread_idx_x() == 0 { helper(out); }
                if warp_id() == 1 { other(out); }
                if n > 0 { uniform(out); }
            }
        },
    )
    .to_string();
    let squeezed: String = out.chars().filter(|c| !c.is_whitespace()).collect();
    // `helper`: neither a block- nor a warp-wide collective; `other`: no block-wide one; `uniform`: anything.
    for (callee, bit) in
        [("helper", BLOCK_COLLECTIVE_BIT), ("helper", WARP_COLLECTIVE_BIT), ("other", BLOCK_COLLECTIVE_BIT)]
    {
        let check =
            format!("::core::assert!({callee}_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage()[1]&{bit}u32==0");
        assert!(squeezed.contains(&check), "`{check}` not in {out}");
    }
    let other_warp = format!("other_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage()[1]&{WARP_COLLECTIVE_BIT}u32");
    assert!(!squeezed.contains(&other_warp), "{out}");
    assert!(!squeezed.contains("uniform_must_be_a_weft_device_fn::__WEFT_DEVICE_FN.usage()[1]"), "{out}");
    assert!(
        out.contains("but not every thread of the block makes this call: it runs under `if thread_idx_x () == 0`"),
        "{out}"
    );
}

#[test]
fn launches_of_kernels_with_warp_collectives_need_whole_warps() {
    let out: String = crate::codegen::expand_kernel(quote!(), quote! { fn k(out: &mut [f32]) { sync_warp(); } })
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    assert!(
        out.contains(&format!(
            "if__WEFT_USAGE[1]&{WARP_COLLECTIVE_BIT}u32!=0{{let__weft_threads=u64::from(cfg.block_dim.0)"
        )),
        "{out}"
    );
    assert!(out.contains("if__weft_threads%32!=0{return::core::result::Result::Err(::weft::host::Error::InvalidArgument{argument:\"cfg\""), "{out}");
}
