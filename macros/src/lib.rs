//! `#[weft::kernel]` and `#[weft::device_fn]`: kernels written in Rust syntax, translated to CUDA C++ on NCCL's
//! device API, with a typed launcher. Use them through the `weft` facade; `docs/macro.md` describes the supported
//! syntax, what is rejected and why, and the generated module.
//!
//! This file holds only the entry points; the translation is the plain library code of `codegen`.
#![forbid(unsafe_code)]

mod codegen;
#[cfg(test)]
#[path = "codegen/tests/mod.rs"]
mod tests;

use proc_macro::TokenStream;

/// Turns a function into a GPU kernel: keeps it (so rustc type-checks the body against `weft::device`) and
/// generates, next to it, a module of the same name with the kernel's CUDA C++ (`SOURCE`), `ENTRY_POINTS`,
/// `CAPABILITIES`, `requirements(&LaunchConfig)` and a typed `launch(…)`.
///
/// Arguments: `types(f32, bf16)` (instantiations of the element type parameter; `types(T = [f32], I = [i32])`
/// for several), `debug` (print the C++ while compiling), resource counts the body's indices do not show
/// (`lsa_barriers = 4`, `gin_signals = grid`, …), `len(x == out, out >= n)` (checked at launch).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    codegen::expand_kernel(attr.into(), item.into()).into()
}

/// Makes a function callable from kernels: it is emitted as a `__device__` function (a template if generic) and
/// included in the source of every kernel that calls it. Takes `debug` and resource counts like `#[kernel]`.
#[proc_macro_attribute]
pub fn device_fn(attr: TokenStream, item: TokenStream) -> TokenStream {
    codegen::expand_device_fn(attr.into(), item.into()).into()
}
