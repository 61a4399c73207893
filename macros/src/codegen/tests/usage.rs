//! Capabilities and resource requirements inferred from the body.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_one_error, kernel_analysis, kernel_errors};
use crate::codegen::usage::{Caps, Resource, ResourceUse, Usage};

fn usage(attr: TokenStream, item: TokenStream) -> Usage {
    kernel_analysis(attr, item).usage
}

fn get(u: &Usage, r: Resource) -> ResourceUse {
    u.resources[r.index()]
}

#[test]
fn lsa_barrier_indexed_by_block_needs_one_per_block() {
    let u = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>) {
                let bar = dev.lsa_barrier(Cta, block_idx_x());
                bar.sync(Cta, Order::Relaxed);
            }
        },
    );
    assert_eq!(u.caps, Caps::LSA);
    assert_eq!(get(&u, Resource::LsaBarrier), ResourceUse { constant: 0, grid_axes: 1 });
}

#[test]
fn constant_indices_need_the_largest_plus_one() {
    let u = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>) {
                let first = dev.lsa_barrier(Cta, 0);
                let b = 2 * 2;
                let second = dev.lsa_barrier(Warp, b + 1);
                let third = dev.lsa_barrier(Cta, 1u32);
            }
        },
    );
    assert_eq!(get(&u, Resource::LsaBarrier), ResourceUse { constant: 6, grid_axes: 0 });
}

#[test]
fn block_index_through_an_immutable_local_and_a_cast() {
    let u = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>) {
                let b = block_idx_y() as u32;
                let bar = dev.lsa_barrier(Cta, b);
            }
        },
    );
    assert_eq!(get(&u, Resource::LsaBarrier), ResourceUse { constant: 0, grid_axes: 0b10 });
}

#[test]
fn gin_signals_counters_contexts_and_barriers() {
    let u = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<LsaGin>, src: &Window<f32>, dst: &Window<f32>) {
                let gin = dev.gin(1);
                gin.put(dev.world(), 0, dst, src, 4, SignalInc(3), CounterInc(0), Cta);
                gin.wait_signal(Cta, 5, 1);
                gin.wait_counter(Cta, 2, 1);
                let rail = gin.rail_barrier(Cta, block_idx_x());
                let world = gin.world_barrier(Cta, 0);
                let hybrid = dev.hybrid_barrier(Cta, &gin, 3);
            }
        },
    );
    assert_eq!(u.caps, Caps::LSA_GIN);
    assert_eq!(get(&u, Resource::GinContext).constant, 2);
    assert_eq!(get(&u, Resource::GinSignal).constant, 6);
    assert_eq!(get(&u, Resource::GinCounter).constant, 3);
    assert_eq!(get(&u, Resource::RailGinBarrier), ResourceUse { constant: 0, grid_axes: 1 });
    assert_eq!(get(&u, Resource::WorldGinBarrier).constant, 1);
    assert_eq!(get(&u, Resource::HybridBarrier).constant, 4);
}

#[test]
fn capabilities_inferred_from_vocabulary() {
    let lsa_window = usage(
        quote!(),
        quote! {
            fn k<C: CapabilitySet>(dev: &DevComm<C>, w: &Window<f32>, out: &mut [f32]) { out[0] = w.lsa(1)[0]; }
        },
    );
    assert_eq!(lsa_window.caps, Caps::LSA);
    let team_only = usage(
        quote!(),
        quote! {
            fn k<C: CapabilitySet>(dev: &DevComm<C>, out: &mut [u32]) { let t = dev.lsa(); out[0] = dev.lsa_size(); }
        },
    );
    assert_eq!(team_only.caps, Caps::NONE);
    let multimem = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<LsaMultimem>, w: &Window<f32>) { let m = dev.lsa_multimem(&w); m.store(0, 1.0); }
        },
    );
    assert_eq!(multimem.caps, Caps::LSA_MULTIMEM);
}

#[test]
fn declared_capabilities_count_even_if_unused() {
    let u = usage(quote!(), quote! { fn k(dev: &DevComm<LsaGinMultimem>) {} });
    assert_eq!(u.caps, Caps { lsa: true, gin: true, multimem: true });
}

#[test]
fn unknown_index_is_an_error_naming_the_attribute() {
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(dev: &DevComm<Lsa>, which: u32) {
                let bar = dev.lsa_barrier(Cta, which);
            }
        },
    );
    assert_one_error(&errors, "cannot tell how many LSA barriers this needs from this index");
    assert!(errors[0].contains("#[kernel(lsa_barriers = N)]"), "{}", errors[0]);
}

#[test]
fn mutable_locals_are_not_followed() {
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(dev: &DevComm<Gin>) {
                let gin = dev.gin(0);
                let mut s = 0;
                s += 1;
                gin.reset_signal(s);
            }
        },
    );
    assert_one_error(&errors, "cannot tell how many GIN signals");
}

#[test]
fn declared_counts_allow_unknown_indices_and_add_up() {
    let u = usage(
        quote!(lsa_barriers = 8, gin_signals = grid),
        quote! {
            fn k(dev: &DevComm<LsaGin>, which: u32) {
                let bar = dev.lsa_barrier(Cta, which);
                let gin = dev.gin(0);
                gin.reset_signal(which);
            }
        },
    );
    assert_eq!(get(&u, Resource::LsaBarrier), ResourceUse { constant: 8, grid_axes: 0 });
    assert_eq!(get(&u, Resource::GinSignal), ResourceUse { constant: 0, grid_axes: 1 });
}

#[test]
fn usage_encoding() {
    let mut u = Usage { caps: Caps::LSA_GIN, ..Usage::default() };
    u.add_index(Resource::LsaBarrier, crate::codegen::usage::IndexValue::Block(0));
    u.add_index(Resource::GinCounter, crate::codegen::usage::IndexValue::Const(4));
    let words = u.encode();
    assert_eq!(words.len(), crate::codegen::usage::USAGE_WORDS);
    assert_eq!(words.len(), 20);
    assert_eq!(&words[..4], &[1, 0b011, 0, 1]);
    assert_eq!(words[2 + 2 * Resource::GinCounter.index()], 5);
}

#[test]
fn ll_all_to_all_blocks_and_slots() {
    let u = usage(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>, handle: LlA2aHandle, out: &mut [f32]) {
                let a2a = dev.ll_a2a(Cta, handle, block_idx_x(), 64);
                a2a.send(dev.lsa_rank(), 3, 1.0f32);
                a2a.broadcast(1, 2.0f32);
                out[0] = a2a.recv::<f32>(2);
                a2a.end();
            }
        },
    );
    assert_eq!(u.caps, Caps::LSA);
    assert_eq!(get(&u, Resource::LlA2aBlock), ResourceUse { constant: 0, grid_axes: 1 });
    assert_eq!(get(&u, Resource::LlA2aSlot), ResourceUse { constant: 4, grid_axes: 0 });
    let errors = kernel_errors(
        quote!(),
        quote! {
            fn k(dev: &DevComm<Lsa>, handle: LlA2aHandle, n: u32) {
                let a2a = dev.ll_a2a(Cta, handle, 0, 64);
                for s in 0..n { a2a.broadcast(s, 1u32); }
            }
        },
    );
    assert_one_error(&errors, "#[kernel(ll_a2a_slots = N)]");
}

#[test]
fn gemm_block_needs_blocks_of_exactly_256_threads_and_the_launcher_says_so() {
    let gemm = quote! {
        fn k<T: MmaElement>(a: &[T], b: &[T], out: &mut [f32], n: usize, k: usize) {
            let tile = a.gemm_block(0, k, b, 0, n, k);
            let mut i = 0;
            while i < tile.len() {
                out[tile.row(i) * n + tile.col(i)] = tile.value(i);
                i += 1;
            }
        }
    };
    let u = usage(quote!(types(bf16)), gemm.clone());
    assert!(u.block_of_256);
    assert_eq!(u.encode()[1] & crate::codegen::usage::BLOCK_OF_256_BIT, crate::codegen::usage::BLOCK_OF_256_BIT);
    let plain = usage(quote!(), quote! { fn k(out: &mut [f32]) { out[0] = 1.0; } });
    assert!(!plain.block_of_256);
    assert_eq!(plain.encode()[1] & crate::codegen::usage::BLOCK_OF_256_BIT, 0);
    // The launcher refuses any other block before launching (the bit is tested on the merged usage, so a device fn
    // that calls gemm_block counts too).
    let out: String = crate::codegen::expand_kernel(quote!(types(bf16)), gemm)
        .to_string()
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    assert!(out.contains("if__WEFT_USAGE[1]&16u32!=0{::weft::host::launch::check_block_of_256(NAME,&cfg)?;}"), "{out}");
}
