//! Names resolve against the vocabulary by type: a method or path that rustc accepts because it exists on some Rust
//! type, but that C++ does not have, is rejected where it is written instead of failing in nvcc at the first launch.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_lines, assert_one_error, body, device_fn_body, device_fn_errors, kernel_errors};

#[track_caller]
fn one_error(item: TokenStream, fragment: &str) {
    assert_one_error(&kernel_errors(TokenStream::new(), item), fragment);
}

#[test]
fn a_method_of_another_vocabulary_type_is_rejected() {
    // `contains` is `Team`'s; `[T]::contains` exists in Rust, `weft::Slice` has no such member.
    one_error(
        quote! { fn k(x: &[u32], out: &mut [u32]) { if x.contains(&3) { out[0] = 1; } } },
        "`contains` is not a method of a slice (`&[T]`) in weft's kernel vocabulary",
    );
    // `get` is `GinSession`'s; `[T]::get` returns an `Option`.
    one_error(
        quote! { fn k(x: &[u32], out: &mut [u32]) { let v = x.get(0); } },
        "`get` is not a method of a slice (`&[T]`)",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, out: &mut [u32]) { out[0] = dev.len() as u32; } },
        "`len` is not a method of `DevComm`",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let t = dev.world(); t.sync(Cta, Order::Relaxed); } },
        "`sync` is not a method of `Team`",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let bar = dev.lsa_barrier(Cta, 0); let m = bar.mask(); } },
        "`mask` is not a method of `LsaBarrier`",
    );
    // `store_pack` exists on `&mut [T]` and window views, not on `&[T]` (rustc says so too); `as_slice` only on
    // shared arrays.
    one_error(
        quote! { fn k(x: &[f32], out: &mut [f32]) { let s = out.as_slice(); } },
        "`as_slice` is not a method of a slice (`&mut [T]`)",
    );
    // Tuples are `Ord` in Rust; `weft::min` has no overload for them.
    one_error(
        quote! { fn k(out: &mut [u32], a: u32) { let t = (a, a).min((1u32, 2u32)); } },
        "`min` is not a method of a tuple",
    );
}

#[test]
fn methods_resolve_on_every_vocabulary_type() {
    let b = body(quote! {
        fn k(dev: &DevComm<LsaGin>, w: &Window<f32>, x: &[f32], out: &mut [f32], h: LlA2aHandle) {
            let team = dev.world();
            let inner = team.inner_factor(2);
            let member = team.contains(inner, 0);
            let gin = dev.gin(0);
            let gbar = gin.rail_barrier(Cta, 0);
            let r = gbar.sync_timeout(Cta, Order::AcqRel, 1000);
            let ok = r.is_ok();
            let view = w.lsa(0);
            let p = view.load_pack(0);
            let wide = p.widen();
            let s = wide.lane_sum() + x.load_wide::<f32>(0).lane(1);
            let lanes = Lanes::coalesced();
            let n = lanes.size() + lanes.mask() + Cta.thread_rank();
            let a2a = dev.ll_a2a(Warp, h, 0, 4);
            let v = a2a.recv::<f32>(1);
            let slots = h.slots() + h.buffer() + team.nranks;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_inner = rs_team.inner_factor(2u);",
            "auto rs_member = rs_team.contains(rs_inner, 0u);",
            "auto rs_r = rs_gbar.sync_timeout(weft::Cta{}, weft::Order::AcqRel, 1000ull);",
            "auto rs_ok = rs_r.is_ok();",
            "auto rs_s = rs_wide.lane_sum() + rs_x.template load_wide<float>(size_t(0)).lane(size_t(1));",
            "auto rs_n = (rs_lanes.size() + rs_lanes.mask()) + weft::Cta{}.thread_rank();",
            "auto rs_v = rs_a2a.template recv<float>(1u);",
            // The handle's fields are private in Rust: its accessors, which weft::LlA2aHandle has too.
            "auto rs_slots = (rs_h.slots() + rs_h.buffer()) + rs_team.nranks;",
        ],
    );
}

#[test]
fn methods_of_values_of_unknown_type_are_rejected_unless_annotated() {
    // A device fn's result: the macro cannot see its type, so it cannot tell whether C++ has `.sync()` on it.
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let bar = open(dev); bar.sync(Cta, Order::Relaxed); } },
        "cannot tell the type of this value, so cannot check that C++ has `.sync()` on it",
    );
    let b = body(quote! {
        fn k(dev: &DevComm<Lsa>) {
            let bar: LsaBarrier<'_, Cta> = open(dev);
            bar.sync(Cta, Order::Relaxed);
        }
    });
    assert_lines(
        &b,
        &[
            "weft::LsaBarrier<weft::Cta> rs_bar = weft::rs_open(rs_dev);",
            "rs_bar.sync(weft::Cta{}, weft::Order::Relaxed);",
        ],
    );
    // Scalar methods are free functions overloaded for every type that has them: no annotation needed.
    let b = body(quote! {
        fn k(x: &[f32], out: &mut [f32]) { let v = helper(x); out[0] = v.sqrt(); }
    });
    assert_lines(&b, &["rs_out[size_t(0)] = weft::sqrt(rs_v);"]);
}

#[test]
fn coop_type_parameters_have_the_coop_methods() {
    let b = device_fn_body(quote! {
        fn spread<Co: Coop>(coop: Co, out: &mut [u32]) {
            out[coop.thread_rank() as usize] = coop.size();
            coop.sync();
        }
    });
    assert_lines(
        &b,
        &[
            "weft::detail::at(rs_out, static_cast<size_t>(rs_coop.thread_rank()), 1) = rs_coop.size();",
            "rs_coop.sync();",
        ],
    );
}

#[test]
fn associated_functions_and_constructors_are_the_vocabularys() {
    one_error(
        quote! { fn k(out: &mut [u32]) { let c = Config::new(); } },
        "`Config` is not a type of weft's kernel vocabulary",
    );
    one_error(
        quote! { fn k(out: &mut [u32]) { let c = Capabilities::new(true, false, false); } },
        "`Capabilities` is not a type of weft's kernel vocabulary",
    );
    one_error(
        quote! { fn k(out: &mut [u32]) { let l = Lanes::full(); } },
        "`Lanes::full` is not an associated function of `Lanes`",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, out: &mut [u32]) { let r = dev.lsa_barrier(Cta, 0).sync_timeout(Cta, Order::AcqRel, 5); out[0] = BarrierResult::is_ok(r) as u32; } },
        "`is_ok` is a method of `BarrierResult`: call it as one",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, out: &mut [u32]) { out[0] = DevComm::rank(dev); } },
        "call `rank` as a method",
    );
    one_error(quote! { fn k(out: &mut [u32]) { let w = Wrapper(3u32); } }, "`Wrapper` is not a constructor");
    one_error(quote! { fn k(out: &mut [u32]) { let m = Mode::Fast; } }, "`Mode::Fast` is not a value");
    one_error(quote! { fn k(out: &mut [u32]) { let m = Marker; } }, "`Marker` is not a value");
    one_error(quote! { fn k(out: &mut [u32]) { let m = Lsa; } }, "`Lsa` is not a value");
    one_error(quote! { fn k(out: &mut [u32]) { let m = weft::device::Everything; } }, "`Everything` is not a value");
    let b = body(quote! {
        fn k<T: Float>(x: &[T], out: &mut [T], v: T) {
            let a = Pack::splat(v);
            let b = Pack::<f32>::splat(1.0);
            let c = WarpSpan::from_warps(0, 2, 1);
            let d = weft::device::SignalInc(2);
            let e = weft::Cta;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_a = weft::Pack<rs_T>::splat(rs_v);",
            "auto rs_b = weft::Pack<float>::splat(1.0f);",
            "auto rs_c = weft::WarpSpan::from_warps(0u, 2u, 1u);",
            "auto rs_d = weft::SignalInc(2u);",
            "auto rs_e = weft::Cta{};",
        ],
    );
}

#[test]
fn scalar_associated_functions_are_the_scalar_methods() {
    let b = body(quote! {
        fn k<T: Float>(out: &mut [f32], x: f32, a: u32, t: T, small: i8) {
            out[0] = f32::sqrt(x) + f32::max(x, 1.0);
            let m = u32::min(a, 3) + u32::count_ones(a);
            let r = T::mul_add(t, t, T::one());
            let bits = small.count_ones() + i8::count_ones(small);
        }
    });
    assert_lines(
        &b,
        &[
            "rs_out[size_t(0)] = weft::sqrt(rs_x) + weft::max(rs_x, 1.0f);",
            "auto rs_m = weft::min(rs_a, 3u) + weft::count_ones(rs_a);",
            "auto rs_r = weft::mul_add(rs_t, rs_t, weft::one<rs_T>());",
            // C++ would count a negative `int8_t`'s sign extension.
            "auto rs_bits = weft::count_ones(static_cast<uint8_t>(rs_small)) + weft::count_ones(static_cast<uint8_t>(rs_small));",
        ],
    );
    one_error(
        quote! { fn k(out: &mut [f32], b: u32) { out[0] = f32::from_bits(b); } },
        "`f32::from_bits` is not in weft's kernel vocabulary",
    );
    one_error(quote! { fn k(out: &mut [u64], b: u32) { out[0] = u64::from(b); } }, "convert with `as` (`x as u64`)");
    one_error(
        quote! { fn k(out: &mut [u32], a: u32) { out[0] = u32::wrapping_add(a, 1); } },
        "`u32::wrapping_add` is not in weft's kernel vocabulary",
    );
    one_error(quote! { fn k<T: Float>(out: &mut [T]) { out[0] = T::default(); } }, "`T::default` is not in");
}

#[test]
fn type_parameters_c_plus_plus_cannot_deduce_must_be_written() {
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, h: LlA2aHandle, out: &mut [f32]) { let a = dev.ll_a2a(Warp, h, 0, 4); out[0] = a.recv(0); } },
        "write the type: `.recv::<T>(…)`",
    );
    one_error(
        quote! { fn k(x: &[f32], out: &mut [f32]) { let w: WidePack<f32> = x.load_wide(0); } },
        "write the type: `.load_wide::<T>(…)`",
    );
    one_error(
        quote! { fn k(out: &mut [f32]) { let w: WidePack<f32> = WidePack::splat(1.0); } },
        "write the element type: `WidePack::<T>::splat(…)`",
    );
}

#[test]
fn fields_are_the_vocabularys() {
    one_error(
        quote! { fn k(out: &mut [u32]) { let s = SignalInc(3); out[0] = s.0; } },
        "`0` is not a field of `SignalInc`",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, out: &mut [u32]) { out[0] = dev.world().size; } },
        "`size` is not a field of `Team`",
    );
}

#[test]
fn types_outside_the_vocabulary_are_rejected() {
    one_error(
        quote! { fn k(out: &mut [u32]) { let c: Config = make(); } },
        "`Config` is not a type of weft's kernel vocabulary",
    );
    let e = device_fn_errors(TokenStream::new(), quote! { fn h(c: &Config) -> u32 { 1 } });
    assert_one_error(&e, "`Config` is not a type of weft's kernel vocabulary");
    // `WindowView` is `weft::View` in C++.
    let b = body(quote! {
        fn k(w: &Window<f32>, out: &mut [f32]) {
            let v: WindowView<'_, f32> = w.local();
            out[0] = v[0];
        }
    });
    assert_lines(&b, &["weft::View<float> rs_v = rs_w.local();"]);
}

#[test]
fn sessions_are_never_copied_or_moved() {
    let e = device_fn_errors(TokenStream::new(), quote! { fn h(bar: LsaBarrier<'_, Cta>) { bar.end(); } });
    assert_one_error(&e, "a `LsaBarrier` session cannot be passed by value: C++ can neither copy nor move it");
    let e = device_fn_errors(TokenStream::new(), quote! { fn h(a: LlA2a<'_, Warp>) {} });
    assert_one_error(&e, "a `LlA2a` session cannot be passed by value");
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let bar = dev.lsa_barrier(Cta, 0); let moved = bar; moved.end(); } },
        "`bar` is a `LsaBarrier` session, which C++ can neither copy nor move",
    );
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let bar = dev.lsa_barrier(Cta, 0); finish(bar); } },
        "`bar` is a `LsaBarrier` session",
    );
    let e = device_fn_errors(
        TokenStream::new(),
        quote! { fn open<C: HasLsa>(dev: &DevComm<C>) -> LsaBarrier<'_, Cta> { let bar = dev.lsa_barrier(Cta, 0); bar } },
    );
    assert_one_error(&e, "`bar` is a `LsaBarrier` session");
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>) { let mut bar = dev.lsa_barrier(Cta, 0); bar.end(); bar = dev.lsa_barrier(Cta, 1); bar.end(); } },
        "a `LsaBarrier` session cannot be reassigned",
    );
    // Lent by reference, and returned as a value C++ constructs in place: fine. GIN sessions are copyable.
    let b = body(quote! {
        fn k(dev: &DevComm<LsaGin>) {
            let bar = dev.lsa_barrier(Cta, 0);
            finish(&bar);
            let gin = dev.gin(0);
            let copy = gin;
        }
    });
    assert_lines(&b, &["weft::rs_finish(rs_bar);", "auto rs_copy = rs_gin;"]);
    let b = device_fn_body(quote! {
        fn open<C: HasLsa>(dev: &DevComm<C>) -> LsaBarrier<'_, Cta> { dev.lsa_barrier(Cta, 0) }
    });
    assert_lines(&b, &["return rs_dev.lsa_barrier(weft::Cta{}, 0u);"]);
}

#[test]
fn float_constants() {
    let b = body(quote! {
        fn k(out: &mut [f32], d: &mut [f64]) {
            out[0] = f32::INFINITY;
            out[1] = f32::NEG_INFINITY + f32::MAX;
            out[2] = f32::MIN * f32::EPSILON - f32::MIN_POSITIVE;
            let nan = f32::NAN;
            d[0] = f64::INFINITY + f64::NEG_INFINITY + f64::NAN;
            d[1] = f64::MAX + f64::MIN + f64::EPSILON + f64::MIN_POSITIVE;
            let lowest = f32::MAX;
        }
    });
    assert_lines(
        &b,
        &[
            "rs_out[size_t(0)] = __int_as_float(0x7f800000);",
            "rs_out[size_t(1)] = (-__int_as_float(0x7f800000)) + 0x1.fffffep+127f;",
            "rs_out[size_t(2)] = ((-0x1.fffffep+127f) * 0x1p-23f) - 0x1p-126f;",
            "auto rs_nan = __int_as_float(0x7fc00000);",
            "rs_d[size_t(0)] = (__longlong_as_double(0x7ff0000000000000ll) + (-__longlong_as_double(0x7ff0000000000000ll))) + __longlong_as_double(0x7ff8000000000000ll);",
            "rs_d[size_t(1)] = ((0x1.fffffffffffffp+1023 + (-0x1.fffffffffffffp+1023)) + 0x1p-52) + 0x1p-1022;",
            "auto rs_lowest = 0x1.fffffep+127f;",
        ],
    );
}

#[test]
fn lowering_errors_are_reported_with_validation_and_signature_errors() {
    let errors = kernel_errors(
        TokenStream::new(),
        quote! {
            fn k(out: &mut [u32], v: Vec<u32>, x: &[u32]) {
                let f = |a: u32| a;
                if x.contains(&3) { out[0] = 1; }
                out[1] = LIMIT;
                out[2] = v.len() as u32;
                out[3] = f(2);
            }
        },
    );
    // The parameter type, the closure, the method of another type and the constant: one each; nothing about the
    // uses of the refused parameter and closure.
    assert_eq!(errors.len(), 4, "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("`Vec` cannot be used in a kernel")), "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("closures are not supported")), "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("`contains` is not a method of a slice")), "{errors:#?}");
    assert!(errors.iter().any(|e| e.contains("kernels cannot read Rust constants or statics")), "{errors:#?}");
}

#[test]
fn one_mistake_gives_one_error() {
    one_error(quote! { fn k(out: &mut [u32]) { let v = out.iter(); out[0] = v.len() as u32; } }, "iterators");
    one_error(
        quote! { fn k(out: &mut [u32]) { let v: Vec<u32> = make(); out[0] = v.len() as u32 + v[0]; } },
        "`Vec` cannot be used in a kernel",
    );
    one_error(quote! { fn k(out: &mut [u32]) { out[0] = Some(3).len(); } }, "kernels have no `Option`/`Result`");
    let e =
        kernel_errors(TokenStream::new(), quote! { fn k((a, b): (u32, u32), out: &mut [u32]) { out[0] = a.len(); } });
    assert_one_error(&e, "parameters must be plain names");
    one_error(
        quote! { fn k(out: &mut [u32], n: usize) { for (i, x) in 0..n { out[i] = x.len(); } } },
        "the loop variable must be a plain name",
    );
    one_error(
        quote! { fn k(out: &mut [u32], n: u32) { match n { (a, b) => out[0] = a.len(), _ => {} } } },
        "this pattern is not supported in kernels",
    );
    // The body of a refused loop is still looked at.
    let e = kernel_errors(
        TokenStream::new(),
        quote! { fn k(out: &mut [u32]) { for x in out.iter() { out[0] = x.count(); let f = |a: u32| a; } } },
    );
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].contains("`for` loops in kernels iterate over a range") && e[1].contains("closures"), "{e:#?}");
}

#[test]
fn comparisons_c_plus_plus_has() {
    // Rust derives `PartialEq` for teams, coops, GIN actions and tuples; weft.cuh has no `operator==` for them.
    one_error(
        quote! { fn k(dev: &DevComm<Lsa>, out: &mut [u32]) { if dev.world() == dev.lsa() { out[0] = 1; } } },
        "C++ cannot compare `Team` with `==`",
    );
    one_error(
        quote! { fn k(out: &mut [u32], a: u32) { if (a, 1u32) != (2u32, a) { out[0] = 1; } } },
        "C++ cannot compare a tuple with `!=`",
    );
    one_error(
        quote! { fn k(out: &mut [u32]) { if Lanes::coalesced() == Lanes::from_mask(1) { out[0] = 1; } } },
        "C++ cannot compare `Lanes` with `==`",
    );
    let b = body(quote! {
        fn k(dev: &DevComm<Lsa>, out: &mut [u32]) {
            let o = Order::Acquire;
            let r = dev.lsa_barrier(Cta, 0).sync_timeout(Cta, Order::AcqRel, 10);
            out[0] = (r == BarrierResult::TimedOut && o != Order::Relaxed && dev.world().rank == dev.lsa().rank) as u32;
        }
    });
    assert_lines(
        &b,
        &["rs_out[size_t(0)] = static_cast<uint32_t>((((rs_r == weft::BarrierResult::TimedOut) && (rs_o != weft::Order::Relaxed)) && (rs_dev.world().rank == rs_dev.lsa().rank)));"],
    );
}
