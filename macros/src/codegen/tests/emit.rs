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
        &["auto a = x[size_t(0)];", "float b = 2.0f;", "uint64_t c;", "c = 7ull;", "b += a;", "auto d = n;"],
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
            "out[size_t(0)] = static_cast<uint32_t>(((a & b) == c));",
            "out[size_t(1)] = a + (b * c);",
            "out[size_t(2)] = (a << 2) | b;",
            "out[size_t(3)] = (a + b) * c;",
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
            "auto x = a;",
            "if (((a < b) && (b >= 3u)) || (!(a == b))) {",
            "x -= 1u;",
            "x *= 2u;",
            "x %= 5u;",
            "x <<= 1;",
            "x |= b;",
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
            "weft::detail::at(out, static_cast<size_t>(i), 1) = weft::to_f32(v) + (static_cast<float>(i));",
            "auto h = static_cast<uint8_t>(i);",
            "auto t = static_cast<T>(3);",
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
            "auto group = weft::match_any(x[size_t(0)]);",
            "auto voters = weft::ballot(x[size_t(1)] > 2u);",
            "auto rank = weft::count_ones((group & ((1u << weft::lane_id()) - 1u)));",
            "auto bits = weft::count_ones(n);",
            // `1` takes the u32 of `count_ones`, not the u64 of its receiver `n`.
            "out[size_t(0)] = ((rank + weft::count_ones(voters)) + bits) + 1u;",
            "auto chunks = weft::div_ceil(n, 32ull);",
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
            "weft::DevComm dev{dev__raw};",
            "auto bar = dev.lsa_barrier(weft::Cta{}, weft::block_idx_x());",
            "bar.sync(weft::Warp{}, weft::Order::Release);",
            "auto z = weft::zero<T>() + weft::from_f32<T>(0.5f);",
            "auto l = weft::Lanes::from_mask(3u);",
            "auto w = weft::WARP_SIZE;",
            "out[size_t(0)] = weft::sqrt(weft::max(x.lsa(0u)[size_t(1)], z));",
            "auto v = a2a.template recv<T>(0u);",
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
        &["auto old = weft::atomic_add(out[size_t(0)], 1u, weft::Scope::Device);", "auto s = gin.read_va_signal(w);"],
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
            "auto t = weft_make_tuple(a, 1.5f);",
            "auto x = b;",
            "auto y = a;",
            "auto p = t._0;",
            "auto tuple = weft_make_tuple(t._1, uint8_t(2));",
            "auto q = tuple._0;",
            "auto tuple_1 = t;",
            "auto m = tuple_1._0;",
            "auto n = tuple_1._1;",
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
    assert_lines(&b, &["auto a_1 = b;", "auto b_1 = a;", "out[size_t(0)] = a_1 - b_1;"]);
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
    assert_lines(&b, &["counter += dev.lsa_size();", "return weft::detail::at(w.local(), size_t(0), 1);"]);
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
            "__shared__ weft::SharedArray<T, 256> tile;",
            "__shared__ weft::SharedArray<uint32_t, 32> flags;",
            "tile[static_cast<size_t>(weft::thread_idx_x())] = x[size_t(0)];",
        ],
    );
}

#[test]
fn shadowing_and_cpp_keywords_get_fresh_names() {
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
            "auto n_1 = n * 2u;",
            "auto new_ = n_1 + 1u;",
            "auto class_ = new_;",
            "auto n_2 = class_;",
            "out[size_t(0)] = n_2;",
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
            "out[size_t(0)] = static_cast<uint8_t>(a + uint8_t(1));",
            "auto c = static_cast<int16_t>(-b);",
            "auto d = static_cast<uint8_t>(~a);",
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
    assert_lines(&b, &["auto x = !flag;", "auto y = ~a;", "auto z = weft_not(weft::helper(w));"]);
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
    assert_lines(&b, &["out[size_t(0)] = 18446744073709551615ull;", "auto a = (-2147483647 - 1);", "auto b = 8u;"]);
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
    assert!(src.contains("template <typename T, typename I>\n__device__ void k__body(ncclDevComm const& dev__raw, weft::Window<T> x, weft::Slice<I> idx, weft::SliceMut<T> out, size_t n) {\n    weft::DevComm dev{dev__raw};\n"));
    assert!(src.contains("extern \"C\" __global__ void k__f32__i32(ncclDevComm dev__raw, weft::Window<float> x, weft::Slice<int32_t> idx, weft::SliceMut<float> out, size_t n) {\n    weft::detail::assume_aligned_arg(x);\n    weft::detail::assume_aligned_arg(idx);\n    weft::detail::assume_aligned_arg(out);\n    k__body<float, int32_t>(dev__raw, x, idx, out, n);\n}"));
    assert!(src.contains("extern \"C\" __global__ void k__bf16__i32(ncclDevComm dev__raw, weft::Window<__nv_bfloat16> x, weft::Slice<int32_t> idx, weft::SliceMut<__nv_bfloat16> out, size_t n) {\n    weft::detail::assume_aligned_arg(x);\n    weft::detail::assume_aligned_arg(idx);\n    weft::detail::assume_aligned_arg(out);\n    k__body<__nv_bfloat16, int32_t>(dev__raw, x, idx, out, n);\n}"));
}

#[test]
fn non_generic_kernel_has_one_entry_point_named_after_it() {
    let item = parse(quote! {
        fn plain(dev: &DevComm<Lsa>, out: &mut [f32]) { out[0] = 1.0; }
    });
    let src = generate_cuda_with(TokenStream::new(), &item, &[], OPTIONS).expect("translates");
    assert!(src.contains("__device__ void plain__body(ncclDevComm const& dev__raw, weft::SliceMut<float> out) {"));
    assert!(src.contains("extern \"C\" __global__ void plain(ncclDevComm dev__raw, weft::SliceMut<float> out) {\n    weft::detail::assume_aligned_arg(out);\n    plain__body(dev__raw, out);\n}"));
    assert_eq!(src.matches("__global__").count(), 1);
}

#[test]
fn device_fn_definition_is_guarded_in_namespace_weft() {
    let item = parse(quote! {
        fn axpy<T: Float>(a: T, x: T, y: T) -> T { a * x + y }
    });
    let src = generate_device_fn_cuda(TokenStream::new(), &item, OPTIONS).expect("translates");
    let guard = src.lines().find(|l| l.starts_with("#ifndef WEFT_DEVICE_FN_axpy_")).expect("guard");
    assert!(src.contains(&format!("{}\n#define {}\nnamespace weft {{\ntemplate <typename T>\n__device__ T axpy(T a, T x, T y) {{\n    return (a * x) + y;\n}}\n}}  // namespace weft\n", guard, &guard[8..])));
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
    assert!(text.contains("auto a = 1u;  // line 2"), "{text}");
    assert!(text.contains("out[size_t(0)] = a;  // line 4"), "{text}");
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
            "auto head = x.subslice(0, n);",
            "auto tail = out.subslice(n, out.len());",
            "auto mid = x.subslice(size_t(1), n - size_t(1));",
            "weft::helper(x.subslice(size_t(2), size_t(4)), head.len() + mid.len());",
            "tail[size_t(0)] = head[size_t(0)];",
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
            "auto lanes = weft::pack_lanes<T>();",
            "auto acc = weft::WidePack<T>::splat(0.0f);",
            "acc += x.load_pack(size_t(0)).widen() * scale;",
            "acc += w.lsa(0u).load_pack(size_t(1)).widen();",
            "auto v = (2.0 * acc) + 1.0;",
            "out.store_pack(lanes, weft::sqrt(v).narrow());",
            "out[size_t(0)] = weft::from_f32<T>(v.lane_sum() + v.lane(size_t(1)));",
        ],
    );
}
