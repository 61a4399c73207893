//! Resource indices the macro cannot follow are checked on the device against their declared count; the LL
//! all-to-all peer against the team; and what safe code could forge into device code is refused.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_one_error, body, device_fn_errors, kernel_analysis, kernel_errors};

/// `text` with the line argument of every `resource_at(…, line)` written `L` (the tests' tokens have no lines).
fn lines_of_checks(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("resource_at(") {
        let start = at + "resource_at(".len();
        out.push_str(&rest[..start]);
        rest = &rest[start..];
        let mut depth = 1;
        let close = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '(' => 1,
                    ')' => -1,
                    _ => 0,
                };
                depth == 0
            })
            .map(|(i, _)| i)
            .unwrap_or(rest.len());
        let args = &rest[..close];
        let last = args.rfind(", ").map(|i| i + 2).unwrap_or(0);
        out.push_str(&args[..last]);
        out.push('L');
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[test]
fn a_computed_barrier_index_is_checked_against_the_declared_count() {
    let a = kernel_analysis(
        quote!(lsa_barriers = 8),
        quote! {
            fn k(dev: &DevComm<Lsa>, which: u32) {
                let bar = dev.lsa_barrier(Cta, which + 1);
                bar.sync(Cta, Order::Relaxed);
            }
        },
    );
    let text = lines_of_checks(&a.lowered.text);
    assert!(
        text.contains(
            "auto rs_bar = rs_dev.lsa_barrier(weft::Cta{}, weft::detail::resource_at(rs_which + 1u, 8u, L));"
        ),
        "{text}"
    );
    // `launch` runs the form in which `resource_at` checks (and `launch_unchecked` the one where it does not).
    assert!(a.usage.device_checks);
    assert_eq!(a.lowered.resource_checks.len(), 1);
    assert_eq!(a.lowered.resource_checks[0].what, "LSA barriers");
}

#[test]
fn inferred_indices_need_no_device_check() {
    let a = kernel_analysis(
        quote!(lsa_barriers = 8),
        quote! {
            fn k(dev: &DevComm<Lsa>) {
                let first = dev.lsa_barrier(Cta, block_idx_x());
                first.sync(Cta, Order::Relaxed);
                first.end();
                let last = dev.lsa_barrier(Cta, 7);
                last.sync(Cta, Order::Relaxed);
            }
        },
    );
    assert!(!a.lowered.text.contains("resource_at"), "{}", a.lowered.text);
    assert!(!a.usage.device_checks);
}

#[test]
fn every_resource_kind_and_grid_counts() {
    let text = kernel_analysis(
        quote!(gin_signals = 4, gin_counters = grid, gin_contexts = 2, rail_gin_barriers = 3, ll_a2a_slots = 16),
        quote! {
            fn k(dev: &DevComm<LsaGin>, w: &Window<f32>, s: u32, handle: LlA2aHandle, out: &mut [f32]) {
                let gin = dev.gin(s);
                gin.put(dev.world(), 0, w, w, 1, SignalInc(s), CounterInc(s), Cta);
                let seen = gin.read_signal(s) + gin.read_counter(s);
                let bar = gin.rail_barrier(Cta, s);
                bar.sync(Cta, Order::Relaxed);
                let a2a = dev.ll_a2a(Warp, handle, block_idx_x(), 4);
                a2a.broadcast(s, 1.0f32);
                out[0] = a2a.recv::<f32>(s);
            }
        },
    )
    .lowered
    .text;
    let text = lines_of_checks(&text);
    for expected in [
        "rs_dev.gin(weft::detail::resource_at(rs_s, 2u, L))",
        "weft::SignalInc(weft::detail::resource_at(rs_s, 4u, L))",
        "weft::CounterInc(weft::detail::resource_at(rs_s, weft::grid_dim_x(), L))",
        "rs_gin.read_signal(weft::detail::resource_at(rs_s, 4u, L)) + rs_gin.read_counter(weft::detail::resource_at(rs_s, weft::grid_dim_x(), L))",
        "rs_gin.rail_barrier(weft::Cta{}, weft::detail::resource_at(rs_s, 3u, L))",
        "rs_a2a.broadcast(weft::detail::resource_at(rs_s, 16u, L), 1.0f)",
        "rs_a2a.template recv<float>(weft::detail::resource_at(rs_s, 16u, L))",
    ] {
        assert!(text.contains(expected), "`{expected}` not in:\n{text}");
    }
}

#[test]
fn an_ll_all_to_all_peer_is_checked_against_the_team() {
    let a = kernel_analysis(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>, handle: LlA2aHandle, peer: u32) {
                let a2a = dev.ll_a2a(Warp, handle, block_idx_x(), 4);
                a2a.send(peer, 0, 1.0f32);
            }
        },
    );
    assert!(
        lines_of_checks(&a.lowered.text)
            .contains("rs_a2a.send(weft::detail::resource_at(rs_peer, rs_a2a.team_size(), L), 0u, 1.0f);"),
        "{}",
        a.lowered.text
    );
    assert!(a.usage.device_checks);
}

#[test]
fn device_fns_check_their_computed_indices_against_their_own_declared_count() {
    // The kernel's count is at least the device fn's (usage words merge by maximum), so its own count bounds it.
    let lines = {
        let item: syn::ItemFn = syn::parse2(quote! {
            fn open<C: HasLsa>(dev: &DevComm<C>, i: u32) {
                let bar = dev.lsa_barrier(Warp, i);
                bar.sync(Warp, Order::Relaxed);
            }
        })
        .unwrap();
        crate::codegen::generate_device_fn_cuda(quote!(lsa_barriers = grid), &item, super::OPTIONS).unwrap()
    };
    assert!(lines_of_checks(&lines).contains("weft::detail::resource_at(rs_i, weft::grid_dim_x(), L)"), "{lines}");
}

#[test]
fn no_device_checks_refuses_a_computed_resource_index() {
    let errors = kernel_errors(
        quote!(no_device_checks, lsa_barriers = 8),
        quote! {
            fn k(dev: &DevComm<Lsa>, which: u32) {
                let bar = dev.lsa_barrier(Cta, which);
                bar.sync(Cta, Order::Relaxed);
            }
        },
    );
    assert_one_error(&errors, "`which` would be checked on the device against the number of LSA barriers");
}

#[test]
fn a_teams_fields_cannot_be_changed() {
    for stmt in [
        quote!(t.nranks = 1000;),
        quote!(t.stride += 7;),
        quote!(atomic_add(&mut t.rank, 1, Scope::Thread);),
        quote!((t.nranks) = 3;),
    ] {
        let errors = kernel_errors(
            TokenStream::new(),
            quote! {
                fn k(dev: &DevComm<Lsa>, x: &Window<f32>, out: &mut [f32]) {
                    let mut t = dev.lsa();
                    #stmt
                    out[0] = x.peer(t, 0)[0];
                }
            },
        );
        assert_one_error(&errors, "cannot be changed in kernels: a team's fields are what NCCL computes peers'");
    }
    // Tuples' fields are the kernel's own values.
    let b = body(quote! {
        fn k(out: &mut [u32]) {
            let mut t = (1u32, 2u32);
            t.0 = 5;
            out[0] = t.0 + t.1;
        }
    });
    assert!(b.iter().any(|l| l.ends_with("._0 = 5u;")), "{b:#?}");
}

#[test]
fn a_device_fn_cannot_take_a_vocabulary_functions_name() {
    for name in [quote!(min), quote!(sync_threads), quote!(r#max)] {
        let errors = device_fn_errors(quote!(), quote!(fn #name(a: u32, b: u32) -> u32 { a + b }));
        assert_one_error(&errors, "a device fn cannot be named");
    }
    assert!(device_fn_errors(
        quote!(),
        quote!(
            fn minimum(a: u32, b: u32) -> u32 {
                a + b
            }
        )
    )
    .is_empty());
}

#[test]
fn a_peer_of_another_team_than_the_lsa_team_is_checked_on_the_device_against_both() {
    // `w.peer(team, p)` is a pointer into the LSA team's mapping: a world or factored team's peer may be outside it.
    let a = kernel_analysis(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>, w: &Window<f32>, out: &mut [f32]) {
                let world = dev.world();
                let lsa = dev.lsa();
                for p in 0..dev.lsa_size() {
                    out[0] += w.peer(lsa, p)[0];
                }
                out[1] = w.peer(world, 0)[0];
                out[2] = w.peer(world.inner_factor(2), 1)[0];
            }
        },
    );
    let text = a.lowered.text;
    assert!(text.contains("rs_w.peer(rs_lsa, rs_p)[size_t(0)]"), "{text}");
    for expected in
        ["weft::detail::peer_at(rs_w, rs_world, 0u, ", "weft::detail::peer_at(rs_w, rs_world.inner_factor(2u), 1u, "]
    {
        let at = text.find(expected).unwrap_or_else(|| panic!("`{expected}` not in {text}"));
        // The device communicator comes last: the LSA team's size.
        assert!(text[at..].split(')').nth(1).is_some() && text[at..].contains(", rs_dev)"), "{text}");
    }
    // Without a device communicator there is nothing to check the LSA index against.
    let errors = device_fn_errors(
        quote!(),
        quote!(
            fn read(w: &Window<f32>, team: Team, p: u32) -> f32 {
                w.peer(team, p)[0]
            }
        ),
    );
    assert_one_error(&errors, "this function has no `&DevComm`");
}
