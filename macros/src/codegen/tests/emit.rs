//! The C++ each supported construct becomes.

use proc_macro2::TokenStream;
use quote::quote;

use super::{assert_lines, body, device_fn_body, parse, OPTIONS};
use crate::codegen::{cuda, generate_cuda_with, generate_device_fn_cuda};

#[test]
fn lets_with_and_without_types() {
    let b = body(quote! {
        fn k(x: &[f32], n: u32) {
            let a = x[0];
            let mut b: f32 = 2.0;
            let c: u64;
            c = 7;
            b += a;
            let d = n;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_a = rs_x[size_t(0)];",
            "float rs_b = 2.0f;",
            "uint64_t rs_c;",
            "rs_c = 7ull;",
            "rs_b += rs_a;",
            "auto rs_d = rs_n;",
        ],
    );
}

#[test]
fn rust_precedence_is_kept_with_parentheses() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32, b: u32, c: u32) {
            out[0] = (a & b == c) as u32;
            out[1] = a + b * c;
            out[2] = a << 2 | b;
            out[3] = (a + b) * c;
        }
    });
    assert_lines(
        &b,
        &[
            "rs_out[size_t(0)] = static_cast<uint32_t>(((rs_a & rs_b) == rs_c));",
            "rs_out[size_t(1)] = rs_a + (rs_b * rs_c);",
            "rs_out[size_t(2)] = (rs_a << 2) | rs_b;",
            "rs_out[size_t(3)] = (rs_a + rs_b) * rs_c;",
        ],
    );
}

#[test]
fn comparisons_logic_and_compound_assignment() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32, b: u32) {
            let mut x = a;
            if a < b && b >= 3 || !(a == b) {
                x -= 1;
                x *= 2;
                x %= 5;
                x <<= 1;
                x |= b;
            }
            out[0] = x;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_x = rs_a;",
            "if (((rs_a < rs_b) && (rs_b >= 3u)) || (!(rs_a == rs_b))) {",
            "rs_x -= 1u;",
            "rs_x *= 2u;",
            "rs_x %= 5u;",
            "rs_x <<= 1;",
            "rs_x |= rs_b;",
            "}",
        ],
    );
}

#[test]
fn casts_become_static_casts_with_the_type_mapping() {
    let b = body(quote! {
        fn k<T: Float>(out: &mut [f32], v: T, i: i64) {
            out[i as usize] = v.to_f32() + (i as f32);
            let h = i as u8;
            let t = 3 as T;
        }
    });
    assert_lines(
        &b,
        &[
            // A signed index is not followed by the bounds analysis: checked on the device.
            "weft::detail::at(rs_out, static_cast<size_t>(rs_i), 1) = weft::to_f32(rs_v) + (static_cast<float>(rs_i));",
            "auto rs_h = static_cast<uint8_t>(rs_i);",
            "auto rs_t = static_cast<rs_T>(3);",
        ],
    );
}

#[test]
fn warp_votes_and_integer_methods() {
    let b = body(quote! {
        fn k(out: &mut [u32], x: &[u32], n: u64) {
            let group = match_any(x[0]);
            let voters = ballot(x[1] > 2);
            let rank = (group & ((1 << lane_id()) - 1)).count_ones();
            let bits = n.count_ones();
            out[0] = rank + voters.count_ones() + bits + 1;
            let chunks = n.div_ceil(32);
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_group = weft::match_any(rs_x[size_t(0)]);",
            "auto rs_voters = weft::ballot(rs_x[size_t(1)] > 2u);",
            "auto rs_rank = weft::count_ones((rs_group & ((1u << weft::lane_id()) - 1u)));",
            "auto rs_bits = weft::count_ones(rs_n);",
            // `1` takes the u32 of `count_ones`, not the u64 of its receiver `n`.
            "rs_out[size_t(0)] = ((rs_rank + weft::count_ones(rs_voters)) + rs_bits) + 1u;",
            "auto rs_chunks = weft::div_ceil(rs_n, 32ull);",
        ],
    );
}

#[test]
fn vocabulary_names_are_copied_into_namespace_weft() {
    let b = body(quote! {
        fn k<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], handle: LlA2aHandle) {
            let a2a = dev.ll_a2a(Cta, handle, block_idx_x(), 64);
            let bar = dev.lsa_barrier(Cta, block_idx_x());
            bar.sync(Warp, Order::Release);
            let z = T::zero() + T::from_f32(0.5);
            let l = Lanes::from_mask(3);
            let w = WARP_SIZE;
            out[0] = x.lsa(0)[1].max(z).sqrt();
            let v = a2a.recv::<T>(0);
            sync_threads();
        }
    });
    assert_lines(
        &b,
        &[
            "weft::DevComm rs_dev{w_dev_raw};",
            "auto rs_bar = rs_dev.lsa_barrier(weft::Cta{}, weft::block_idx_x());",
            "rs_bar.sync(weft::Warp{}, weft::Order::Release);",
            "auto rs_z = weft::zero<rs_T>() + weft::from_f32<rs_T>(0.5f);",
            "auto rs_l = weft::Lanes::from_mask(3u);",
            "auto rs_w = weft::WARP_SIZE;",
            "rs_out[size_t(0)] = weft::sqrt(weft::max(rs_x.lsa(0u)[size_t(1)], rs_z));",
            "auto rs_v = rs_a2a.template recv<rs_T>(0u);",
            "weft::sync_threads();",
        ],
    );
}

#[test]
fn references_passed_to_functions_disappear() {
    let b = body(quote! {
        fn k(dev: &DevComm<Gin>, out: &mut [u32], w: &Window<u64>) {
            let gin = dev.gin(0);
            let old = atomic_add(&mut out[0], 1, Scope::Device);
            let s = gin.read_va_signal(&w);
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_old = weft::atomic_add(rs_out[size_t(0)], 1u, weft::Scope::Device);",
            "auto rs_s = rs_gin.read_va_signal(rs_w);",
        ],
    );
}

#[test]
fn tuples_construct_index_and_destructure() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32, b: u32) {
            let t = (a, 1.5f32);
            let (x, y) = (b, a);
            let (p, (q, _)) = (t.0, (t.1, 2u8));
            let (m, n) = t;
            out[0] = t.0 + x + y;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_t = weft_make_tuple(rs_a, 1.5f);",
            "auto rs_x = rs_b;",
            "auto rs_y = rs_a;",
            "auto rs_p = rs_t._0;",
            "auto w_tuple = weft_make_tuple(rs_t._1, uint8_t(2));",
            "auto rs_q = w_tuple._0;",
            "auto w_tuple_1 = rs_t;",
            "auto rs_m = w_tuple_1._0;",
            "auto rs_n = w_tuple_1._1;",
        ],
    );
}

#[test]
fn tuple_destructuring_evaluates_every_value_before_binding() {
    let b = body(quote! {
        fn k(out: &mut [u32], a: u32, b: u32) {
            let (a, b) = (b, a);
            out[0] = a - b;
        }
    });
    assert_lines(&b, &["auto rs_a_1 = rs_b;", "auto rs_b_1 = rs_a;", "rs_out[size_t(0)] = rs_a_1 - rs_b_1;"]);
}

#[test]
fn device_fn_reference_parameters() {
    let b = device_fn_body(quote! {
        fn bump<C: HasLsa>(dev: &DevComm<C>, counter: &mut u32, w: &Window<f32>) -> f32 {
            *counter += dev.lsa_size();
            w.local()[0]
        }
    });
    // A device fn's buffers have no length known at launch: its accesses are checked on the device.
    assert_lines(&b, &["rs_counter += rs_dev.lsa_size();", "return weft::detail::at(rs_w.local(), size_t(0), 1);"]);
}

#[test]
fn shared_arrays_are_declared_shared() {
    let b = body(quote! {
        fn k<T: Float>(x: &[T]) {
            let mut tile = SharedArray::<T, 256>::new();
            let flags: SharedArray<u32, 32> = SharedArray::new();
            tile[thread_idx_x() as usize] = x[0];
        }
    });
    assert_lines(
        &b,
        &[
            "__shared__ weft::SharedArray<rs_T, 256> rs_tile;",
            "__shared__ weft::SharedArray<uint32_t, 32> rs_flags;",
            "rs_tile[static_cast<size_t>(weft::thread_idx_x())] = rs_x[size_t(0)];",
        ],
    );
}

#[test]
fn shadowing_and_cpp_keywords_get_fresh_names() {
    // Every user name is `rs_…` in C++ (names.rs): a C++ keyword is no exception, a shadowing binding gets a number.
    let b = body(quote! {
        fn k(out: &mut [u32], n: u32) {
            let n = n * 2;
            let new = n + 1;
            let class = new;
            let n = class;
            out[0] = n;
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_n_1 = rs_n * 2u;",
            "auto rs_new = rs_n_1 + 1u;",
            "auto rs_class = rs_new;",
            "auto rs_n_2 = rs_class;",
            "rs_out[size_t(0)] = rs_n_2;",
        ],
    );
}

#[test]
fn small_integers_keep_their_type_after_promotion() {
    let b = body(quote! {
        fn k(out: &mut [u8], a: u8, b: i16) {
            out[0] = a + 1;
            let c = -b;
            let d = !a;
        }
    });
    assert_lines(
        &b,
        &[
            "rs_out[size_t(0)] = static_cast<uint8_t>(rs_a + uint8_t(1));",
            "auto rs_c = static_cast<int16_t>(-rs_b);",
            "auto rs_d = static_cast<uint8_t>(~rs_a);",
        ],
    );
}

#[test]
fn not_on_bool_integer_and_unknown() {
    let b = body(quote! {
        fn k(flag: bool, a: u32, w: &Window<u32>) {
            let x = !flag;
            let y = !a;
            let z = !helper(w);
        }
    });
    assert_lines(&b, &["auto rs_x = !rs_flag;", "auto rs_y = ~rs_a;", "auto rs_z = weft_not(weft::rs_helper(rs_w));"]);
}

#[test]
fn integer_limits() {
    let b = body(quote! {
        fn k(out: &mut [u64]) {
            out[0] = u64::MAX;
            let a = i32::MIN;
            let b = u8::BITS;
        }
    });
    assert_lines(
        &b,
        &["rs_out[size_t(0)] = 18446744073709551615ull;", "auto rs_a = (-2147483647 - 1);", "auto rs_b = 8u;"],
    );
}

#[test]
fn kernel_translation_unit() {
    let item = parse(quote! {
        fn k<T: Float, I: Element>(dev: &DevComm<Lsa>, x: &Window<T>, idx: &[I], out: &mut [T], n: usize) {
            out[0] = x.local()[0];
        }
    });
    let attr: TokenStream = quote!(types(T = [f32, bf16], I = [i32]));
    let src = generate_cuda_with(attr, &item, &[], OPTIONS).expect("translates");
    assert!(src.starts_with("// Generated by #[weft::kernel] from the Rust function `k`."));
    assert!(src.contains("#include \"weft.cuh\"\n"));
    assert!(src.contains("template <typename rs_T, typename rs_I>\n__device__ void rs_k__body(ncclDevComm const& w_dev_raw, weft::Window<rs_T> rs_x, weft::Slice<rs_I> rs_idx, weft::SliceMut<rs_T> rs_out, size_t rs_n) {\n    weft::DevComm rs_dev{w_dev_raw};\n"));
    assert!(src.contains("extern \"C\" __global__ void rs_k__f32__i32(ncclDevComm w_dev_raw, weft::Window<float> rs_x, weft::Slice<int32_t> rs_idx, weft::SliceMut<float> rs_out, size_t rs_n) {\n    weft::detail::assume_aligned_arg(rs_x);\n    weft::detail::assume_aligned_arg(rs_idx);\n    weft::detail::assume_aligned_arg(rs_out);\n    rs_k__body<float, int32_t>(w_dev_raw, rs_x, rs_idx, rs_out, rs_n);\n}"));
    assert!(src.contains("extern \"C\" __global__ void rs_k__bf16__i32(ncclDevComm w_dev_raw, weft::Window<__nv_bfloat16> rs_x, weft::Slice<int32_t> rs_idx, weft::SliceMut<__nv_bfloat16> rs_out, size_t rs_n) {\n    weft::detail::assume_aligned_arg(rs_x);\n    weft::detail::assume_aligned_arg(rs_idx);\n    weft::detail::assume_aligned_arg(rs_out);\n    rs_k__body<__nv_bfloat16, int32_t>(w_dev_raw, rs_x, rs_idx, rs_out, rs_n);\n}"));
}

#[test]
fn non_generic_kernel_has_one_entry_point_named_after_it() {
    let item = parse(quote! {
        fn plain(dev: &DevComm<Lsa>, out: &mut [f32]) { out[0] = 1.0; }
    });
    let src = generate_cuda_with(TokenStream::new(), &item, &[], OPTIONS).expect("translates");
    assert!(
        src.contains("__device__ void rs_plain__body(ncclDevComm const& w_dev_raw, weft::SliceMut<float> rs_out) {")
    );
    assert!(src.contains("extern \"C\" __global__ void rs_plain(ncclDevComm w_dev_raw, weft::SliceMut<float> rs_out) {\n    weft::detail::assume_aligned_arg(rs_out);\n    rs_plain__body(w_dev_raw, rs_out);\n}"));
    assert_eq!(src.matches("__global__").count(), 1);
}

#[test]
fn device_fn_definition_is_guarded_in_namespace_weft() {
    let item = parse(quote! {
        fn axpy<T: Float>(a: T, x: T, y: T) -> T { a * x + y }
    });
    let src = generate_device_fn_cuda(TokenStream::new(), &item, OPTIONS).expect("translates");
    let guard = src.lines().find(|l| l.starts_with("#ifndef WEFT_DEVICE_FN_rs_axpy_")).expect("guard");
    assert!(src.contains(&format!("{}\n#define {}\nnamespace weft {{\ntemplate <typename rs_T>\n__device__ rs_T rs_axpy(rs_T rs_a, rs_T rs_x, rs_T rs_y) {{\n    return (rs_a * rs_x) + rs_y;\n}}\n}}  // namespace weft\n", guard, &guard[8..])));
}

#[test]
fn prelude_defines_tuples_and_not() {
    let h = cuda::header("k");
    assert!(h.contains("template <typename A0, typename A1> struct weft_tuple2 { A0 _0; A1 _1; };"));
    assert!(h.contains("__device__ __forceinline__ bool weft_not(bool v) { return !v; }"));
}

#[test]
fn line_comments_name_the_rust_line() {
    let src: syn::ItemFn = syn::parse_str("fn k(out: &mut [u32]) {\n    let a = 1u32;\n\n    out[0] = a;\n}").unwrap();
    let a = {
        let cx = crate::codegen::ctxt::Ctxt::new();
        crate::codegen::analyze(
            crate::codegen::ast::FnKind::Kernel,
            TokenStream::new(),
            &src,
            crate::codegen::lower::Options { line_comments: true },
            &cx,
        )
        .unwrap()
    };
    let text = a.lowered.text;
    assert!(text.contains("auto rs_a = 1u;  // line 2"), "{text}");
    assert!(text.contains("rs_out[size_t(0)] = rs_a;  // line 4"), "{text}");
}

#[test]
fn sub_slices() {
    let b = body(quote! {
        fn k(x: &[f32], out: &mut [f32], n: usize) {
            let head = &x[..n];
            let tail = &mut out[n..];
            let mid = &x[1..n - 1];
            helper(&x[2..4], head.len() + mid.len());
            tail[0] = head[0];
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_head = rs_x.subslice(0, rs_n);",
            "auto rs_tail = rs_out.subslice(rs_n, rs_out.len());",
            "auto rs_mid = rs_x.subslice(size_t(1), rs_n - size_t(1));",
            "weft::rs_helper(rs_x.subslice(size_t(2), size_t(4)), rs_head.len() + rs_mid.len());",
            "rs_tail[size_t(0)] = rs_head[size_t(0)];",
        ],
    );
}

#[test]
fn packs_lower_to_member_calls_and_operators() {
    let b = body(quote! {
        fn k<T: Float>(x: &[T], out: &mut [T], w: &Window<T>, scale: f32) {
            let lanes = pack_lanes::<T>();
            let mut acc = WidePack::<T>::splat(0.0);
            acc += x.load_pack(0).widen() * scale;
            acc += w.lsa(0).load_pack(1).widen();
            let v = 2.0 * acc + 1.0;
            out.store_pack(lanes, v.sqrt().narrow());
            out[0] = T::from_f32(v.lane_sum() + v.lane(1));
        }
    });
    assert_lines(
        &b,
        &[
            "auto rs_lanes = weft::pack_lanes<rs_T>();",
            "auto rs_acc = weft::WidePack<rs_T>::splat(0.0f);",
            "rs_acc += rs_x.load_pack(size_t(0)).widen() * rs_scale;",
            "rs_acc += rs_w.lsa(0u).load_pack(size_t(1)).widen();",
            "auto rs_v = (2.0 * rs_acc) + 1.0;",
            "rs_out.store_pack(rs_lanes, weft::sqrt(rs_v).narrow());",
            "rs_out[size_t(0)] = weft::from_f32<rs_T>(rs_v.lane_sum() + rs_v.lane(size_t(1)));",
        ],
    );
}
