//! The bounds analysis: which accesses are proven (checked at launch, or in bounds by construction) and which are
//! checked on the device, what each compiles to, and which the repository's kernels check where.

use quote::quote;

use super::corpus;
use super::*;
use crate::codegen::bounds::Decision::{self, AtLaunch, Discharged, OnDevice};

/// `(access, decision)` of every site of a kernel, in body order.
fn decisions(attr: TokenStream, item: TokenStream) -> Vec<(String, Decision)> {
    let a = kernel_analysis(attr, item);
    let b = &a.lowered.bounds;
    b.sites.iter().enumerate().map(|(i, s)| (s.access.clone(), b.decision(i))).collect()
}

#[track_caller]
fn assert_decisions(attr: TokenStream, item: TokenStream, want: &[(&str, Decision)]) {
    let got = decisions(attr, item);
    let got: Vec<(&str, Decision)> = got.iter().map(|(a, d)| (a.as_str(), *d)).collect();
    assert_eq!(got, want);
}

#[test]
fn a_grid_stride_loop_bounds_its_accesses_by_its_length() {
    assert_decisions(
        quote!(),
        quote! {
            fn copy(x: &[f32], out: &mut [f32], n: usize) {
                for i in grid_stride(n) {
                    out[i] = x[i];
                }
            }
        },
        &[("out[i]", AtLaunch), ("x[i]", AtLaunch)],
    );
}

#[test]
fn an_index_below_the_very_length_needs_no_check_at_all() {
    assert_decisions(
        quote!(),
        quote! {
            fn k(x: &[f32], out: &mut [f32]) {
                for i in 0..x.len() {
                    if i < out.len() {
                        out[i] = x[i];
                    }
                }
            }
        },
        &[("out[i]", Discharged), ("x[i]", Discharged)],
    );
}

#[test]
fn packs_and_window_views_are_bounded_by_the_team_and_the_window() {
    let b = kernel_analysis(
        quote!(),
        quote! {
            fn k<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
                for p in grid_stride(n / pack_lanes::<T>()) {
                    let mut acc = WidePack::<T>::splat(0.0);
                    for peer in 0..dev.lsa_size() {
                        acc += x.lsa(peer).load_pack(p).widen();
                    }
                    out.store_pack(p, acc.narrow());
                }
            }
        },
    );
    let bounds = &b.lowered.bounds;
    let got: Vec<(&str, Decision)> =
        bounds.sites.iter().enumerate().map(|(i, s)| (s.access.as_str(), bounds.decision(i))).collect();
    assert_eq!(
        got,
        [
            ("x.lsa(peer)", Discharged),
            ("x.lsa(peer).load_pack(p)", AtLaunch),
            ("out.store_pack(p, acc.narrow())", AtLaunch)
        ]
    );
    // The pack index's range, as the launcher evaluates it.
    assert_eq!(bounds.describe(bounds.sites[1].index.unwrap()), "[0..(n / lanes(T))]");
    assert_eq!(bounds.describe(bounds.sites[1].len.unwrap()), "x.len()");
}

#[test]
fn what_the_kernel_reads_from_memory_is_checked_on_the_device() {
    let item = quote! {
        fn gather(x: &[f32], idx: &[u32], out: &mut [f32], n: usize) {
            for i in grid_stride(n) {
                out[i] = x[idx[i] as usize];
            }
        }
    };
    assert_decisions(
        quote!(),
        item.clone(),
        &[("out[i]", AtLaunch), ("idx[i]", AtLaunch), ("x[idx[i] as usize]", OnDevice)],
    );
    let a = kernel_analysis(quote!(), item);
    assert_lines(
        &lines(&a.lowered.text),
        &["rs_out[rs_i] = weft::detail::at(rs_x, static_cast<size_t>(rs_idx[rs_i]), 1);"],
    );
    assert!(a.usage.device_checks, "the launcher must pick the form with device checks");
}

#[test]
fn loop_carried_counters_are_bounded_by_their_loop_condition() {
    assert_decisions(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: usize) {
                let mut i = index_1d();
                while i < n {
                    out[i] = 1.0;
                    i += grid_size_1d();
                }
                out[i] = 2.0;
            }
        },
        // After the loop, `i` is untracked again.
        &[("out[i]", AtLaunch), ("out[i]", OnDevice)],
    );
}

#[test]
fn an_early_return_narrows_the_rest_of_the_block() {
    assert_decisions(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: usize) {
                let i = index_1d();
                if i >= n {
                    return;
                }
                out[i] = 1.0;
            }
        },
        &[("out[i]", AtLaunch)],
    );
}

#[test]
fn a_condition_decided_at_launch_guards_the_check() {
    let a = kernel_analysis(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: usize, packed: bool) {
                let whole = n % 4 == 0;
                if whole {
                    for i in grid_stride(n) {
                        out[i] = 1.0;
                    }
                }
            }
        },
    );
    let b = &a.lowered.bounds;
    assert_eq!(b.decision(0), AtLaunch);
    assert_eq!(b.sites[0].guards.len(), 1, "checked only when `whole` holds at launch");
}

#[test]
fn a_branch_the_launch_decides_keeps_the_bound_exact_and_one_it_cannot_does_not() {
    // Example 03's two-shot sizes its loop by `if packed { n / lanes } else { n }`: the launch knows `packed`, so
    // the bound is the branch taken (it used to be the join of both, and a correct launch was refused).
    assert_decisions(
        quote!(),
        quote! {
            fn k(x: &[f32], out: &mut [f32], n: usize, hidden: usize) {
                let packed = hidden % 4 == 0;
                let units = if packed { n / 4 } else { n };
                for u in grid_stride(units) {
                    out[u] = x[u];
                }
            }
        },
        &[("out[u]", AtLaunch), ("x[u]", AtLaunch)],
    );
    // A condition the launch may not decide (`|` of known values is only bounded on the host): the join of both
    // sides may be more than the kernel reaches, so the access is checked on the device rather than refused.
    assert_decisions(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: usize, hidden: usize) {
                let units = if (hidden | 1) == 5 { n / 4 } else { n };
                for u in grid_stride(units) {
                    out[u] = 1.0;
                }
            }
        },
        &[("out[u]", OnDevice)],
    );
}

#[test]
fn a_bound_the_kernel_may_not_reach_is_not_a_launch_error() {
    // `dest < peers` holds only for lanes with `t < end` (it is set under that condition), so `t`'s range under it
    // is larger than what the kernel reaches: refusing a launch for it would be wrong, so it is checked on the
    // device instead. An unrelated condition (`owner != me`) keeps the bound (the selector excludes one value).
    assert_decisions(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>, out: &mut [u32], data: &[u32], end: usize) {
                let t = index_1d();
                let mut dest = dev.lsa_size();
                if t < end && data[t] < 4 {
                    dest = data[t];
                }
                if dest < dev.lsa_size() {
                    out[t] = dest;
                }
                for owner in 0..dev.lsa_size() {
                    if owner != dev.lsa_rank() {
                        out[owner as usize] = 0;
                    }
                }
            }
        },
        &[("data[t]", AtLaunch), ("data[t]", AtLaunch), ("out[t]", OnDevice), ("out[owner as usize]", AtLaunch)],
    );
}

#[test]
fn inexact_bounds_are_checked_on_the_device() {
    assert_decisions(
        quote!(),
        quote! {
            fn k(out: &mut [f32], n: usize, m: usize, s: i32) {
                for i in grid_stride(n) {
                    out[i % m] = 1.0;
                }
                for i in (0..n).step_by(4) {
                    out[i] = 1.0;
                }
                out[s as usize] = 2.0;
            }
        },
        &[("out[i % m]", OnDevice), ("out[i]", OnDevice), ("out[s as usize]", OnDevice)],
    );
}

#[test]
fn shared_arrays_have_their_declared_length() {
    let a = kernel_analysis(
        quote!(),
        quote! {
            fn k(out: &mut [u32]) {
                let mut s = SharedArray::<u32, 256>::new();
                s[thread_idx_x() as usize] = 1;
                out[0] = s[255];
            }
        },
    );
    let b = &a.lowered.bounds;
    assert_eq!(b.describe(b.sites[0].len.unwrap()), "256");
    assert_eq!(b.decision(0), AtLaunch, "a block of more than 256 threads is refused at launch");
}

#[test]
fn sub_slices_and_window_offsets_shrink_the_length() {
    let a = kernel_analysis(
        quote!(),
        quote! {
            fn k<T: Float>(x: &[T], w: &Window<T>, offset: usize, out: &mut [T], n: usize) {
                let xs = &x[offset..offset + n];
                let view = w.offset(offset).local();
                for i in grid_stride(n) {
                    out[i] = xs[i] + view[i];
                }
            }
        },
    );
    let b = &a.lowered.bounds;
    let describe: Vec<(String, String)> =
        b.sites.iter().map(|s| (s.access.clone(), s.len.map(|l| b.describe(l)).unwrap_or_default())).collect();
    assert_eq!(
        describe,
        [
            ("x[offset..offset + n]".to_string(), "x.len()".to_string()),
            ("out[i]".into(), "out.len()".into()),
            ("xs[i]".into(), "((offset + n) -| offset)".into()),
            ("view[i]".into(), "(w.len() -| offset)".into()),
        ]
    );
    assert!((0..4).all(|i| b.decision(i) == AtLaunch));
}

#[test]
fn device_fns_prove_only_what_their_own_lengths_show() {
    let b = device_fn_body(quote! {
        fn sum(x: &[f32], i: usize) -> f32 {
            let mut acc: f32 = 0.0;
            for k in 0..x.len() {
                acc += x[k];
            }
            acc + x[i]
        }
    });
    assert_lines(&b, &["rs_acc += rs_x[rs_k];", "return rs_acc + weft::detail::at(rs_x, rs_i, 1);"]);
}

#[test]
fn an_unprovable_lsa_peer_needs_a_device_communicator_to_be_checked() {
    let errors = kernel_errors(
        quote!(),
        quote! {
            fn k(x: &Window<f32>, peers: &[u32], out: &mut [f32]) {
                out[0] = x.lsa(peers[0])[0];
            }
        },
    );
    assert_one_error(&errors, "no `&DevComm` parameter to check it against on the device");
}

/// The accesses of the repository's kernels that are checked on the device, by kernel: the examples' fast paths
/// carry none (their cost was not measured; see docs/macro.md, "Bounds"), except where the index is data (MoE,
/// GIN ring) or moves by a device fn (the epilogue's bias column).
#[test]
fn the_repository_kernels_check_on_the_device_only_what_cannot_be_proven() {
    let mut got: Vec<(String, Vec<String>)> = Vec::new();
    for case in corpus::accepted_sources() {
        if case.kind != FnKind::Kernel {
            continue;
        }
        let cx = Ctxt::new();
        let a = analyze(case.kind, case.attr.clone(), &case.item, OPTIONS, &cx).expect("analysis");
        let on_device: Vec<String> = a.lowered.bounds.unproven().map(|s| s.access.clone()).collect();
        got.push((case.item.sig.ident.to_string(), on_device));
    }
    let of = |name: &str| -> Vec<String> {
        got.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no kernel {name}")).1.clone()
    };
    for fully_proven in [
        "lsa_allreduce",
        "rmsnorm_residual_tp",
        "zero_adam_step",
        "copy_from_next_peer",
        "barrier_round_trips",
        "fill_window",
        "pack_axpy",
        "pack_window_copy",
        "bounded_fill",
        "gin_ring_put",
    ] {
        assert_eq!(of(fully_proven), Vec::<String>::new(), "{fully_proven}");
    }
    assert_eq!(of("allreduce_bias_residual_one_shot"), ["bias.load_pack(c)", "bias[c]"]);
    assert_eq!(of("allreduce_bias_residual_two_shot"), ["bias.load_pack(c)", "bias[c]"]);
    assert!(of("moe_dispatch").contains(&"row.load_pack(from + c)".to_string()));
    assert!(of("moe_combine").contains(&"row.load_pack(from + c)".to_string()));
    assert!(!of("gin_ring_allgather").is_empty());
}

#[test]
fn a_local_changed_where_the_analysis_cannot_see_is_no_longer_trusted() {
    // Lent as `&mut` to an atomic, assigned in one branch of an `if` value or on the right of `&&`: each time the
    // local's value afterwards is not the one it had, so its accesses are checked on the device.
    assert_decisions(
        quote!(),
        quote! {
            fn k(out: &mut [u32], flag: &[u32], n: usize) {
                let mut i: u32 = 0;
                atomic_add(&mut i, 5, Scope::Device);
                out[i as usize] = 1;
                let mut j: usize = 0;
                let _ = if flag[0] > 0 { j = n + 100; 1u32 } else { 0u32 };
                out[j] = 2;
                let mut k: usize = 0;
                if flag[1] > 0 && { k = n + 100; true } {
                    out[0] = 3;
                }
                out[k] = 4;
            }
        },
        &[
            ("out[i as usize]", OnDevice),
            ("flag[0]", AtLaunch),
            ("out[j]", OnDevice),
            ("flag[1]", AtLaunch),
            ("out[0]", AtLaunch),
            ("out[k]", OnDevice),
        ],
    );
}

#[test]
fn an_if_value_inside_a_comparison_does_not_stop_the_analysis() {
    // Found by the fuzzer: re-reading an expression as a statement (`{ if … {} == x; }`) does not parse.
    let errors = kernel_errors(
        quote!(),
        quote! {
            fn k(out: &mut [u32], a: u32, b: u32) {
                let mut m: u32 = 0;
                out[0] = (if a > b { m = 1; a } else { b } == m) as u32;
            }
        },
    );
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn no_device_checks_makes_an_unproven_access_an_error_at_the_access() {
    let errors = kernel_errors(
        quote!(no_device_checks),
        quote! {
            fn gather(x: &[f32], idx: &[u32], out: &mut [f32], n: usize) {
                for i in grid_stride(n) {
                    out[i] = x[idx[i] as usize];
                }
            }
        },
    );
    assert_one_error(&errors, "`x[idx[i] as usize]` would be checked on the device, which #[kernel(no_device_checks)]");
    assert!(errors[0].contains("weft cannot follow its index"), "{}", errors[0]);
    // A kernel whose accesses are all proven is fine with it.
    kernel_analysis(
        quote!(no_device_checks),
        quote! {
            fn copy(x: &[f32], out: &mut [f32], n: usize) {
                for i in grid_stride(n) {
                    out[i] = x[i];
                }
            }
        },
    );
    // Device fns have no launch of their own.
    assert_one_error(
        &device_fn_errors(quote!(no_device_checks), quote! { fn f(x: &[f32]) -> f32 { x[0] } }),
        "unknown argument `no_device_checks`",
    );
}
