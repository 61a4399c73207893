//! Unit tests of the translation: C++ per construct, inference, requirements, rejections.

use proc_macro2::TokenStream;
use quote::quote;

use super::lower::Options;

pub(crate) fn kernel_cuda(attr: TokenStream, item: TokenStream) -> Result<String, Vec<String>> {
    let item: syn::ItemFn = syn::parse2(item).expect("test kernel parses");
    super::generate_cuda_with(attr, &item, &[], Options { line_comments: false })
        .map_err(|errs| errs.into_iter().map(|e| e.to_string()).collect())
}

#[test]
fn scratch() {
    let out = kernel_cuda(quote!(), quote! {
        fn allreduce_add<T: Float>(dev: &DevComm<Lsa>, x: &Window<T>, out: &mut [T], n: usize) {
            let bar = dev.lsa_barrier(Cta, block_idx_x());
            bar.sync(Cta, Order::Relaxed);
            for i in grid_stride(n) {
                let mut acc = T::zero();
                for peer in 0..dev.lsa_size() { acc += x.lsa(peer)[i]; }
                out[i] = acc;
            }
            bar.sync(Cta, Order::Release);
        }
    });
    match out { Ok(s) => println!("{s}"), Err(e) => println!("ERR {e:?}") }
}
