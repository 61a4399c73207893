//! Unit tests of the translation: C++ per construct, literal typing, capability and requirement inference, the
//! generated module, and every rejection.

mod bounds;
mod control_flow;
mod corpus;
mod emit;
mod fuzz;
mod infer;
mod module;
mod reject;
mod resolve;
mod resources;
mod uniform;
mod usage;
mod vocabulary;

use proc_macro2::TokenStream;

use crate::codegen::ast::FnKind;
use crate::codegen::ctxt::Ctxt;
use crate::codegen::lower::Options;
use crate::codegen::{analyze, Analysis};

const OPTIONS: Options = Options { line_comments: false };

fn parse(item: TokenStream) -> syn::ItemFn {
    syn::parse2(item).expect("test function parses")
}

/// Analysis of a kernel, panicking with the errors if there are any.
fn kernel_analysis(attr: TokenStream, item: TokenStream) -> Analysis {
    let item = parse(item);
    let cx = Ctxt::new();
    let a = analyze(FnKind::Kernel, attr, &item, OPTIONS, &cx);
    let errors: Vec<String> = cx.into_errors().iter().map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "unexpected errors: {errors:#?}");
    a.expect("analysis")
}

/// The lowered body's statements, one trimmed string per line.
fn body(item: TokenStream) -> Vec<String> {
    lines(&kernel_analysis(TokenStream::new(), item).lowered.text)
}

fn device_fn_body(item: TokenStream) -> Vec<String> {
    let item = parse(item);
    let cx = Ctxt::new();
    let a = analyze(FnKind::DeviceFn, TokenStream::new(), &item, OPTIONS, &cx);
    let errors: Vec<String> = cx.into_errors().iter().map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "unexpected errors: {errors:#?}");
    lines(&a.expect("analysis").lowered.text)
}

fn lines(text: &str) -> Vec<String> {
    text.lines().map(|l| l.trim().to_string()).filter(|l| !l.is_empty()).collect()
}

/// Every error message of a kernel (attribute `attr`).
fn kernel_errors(attr: TokenStream, item: TokenStream) -> Vec<String> {
    let item = parse(item);
    let cx = Ctxt::new();
    let _ = analyze(FnKind::Kernel, attr, &item, OPTIONS, &cx);
    cx.into_errors().iter().map(|e| e.to_string()).collect()
}

fn device_fn_errors(attr: TokenStream, item: TokenStream) -> Vec<String> {
    let item = parse(item);
    let cx = Ctxt::new();
    let _ = analyze(FnKind::DeviceFn, attr, &item, OPTIONS, &cx);
    cx.into_errors().iter().map(|e| e.to_string()).collect()
}

/// Asserts that `haystack` contains each of `needles` as a whole line, in order.
#[track_caller]
fn assert_lines(haystack: &[String], needles: &[&str]) {
    let mut from = 0;
    for needle in needles {
        match haystack[from..].iter().position(|l| l == needle) {
            Some(i) => from += i + 1,
            None => panic!("line `{needle}` not found (in order) in:\n{}", haystack.join("\n")),
        }
    }
}

/// Asserts exactly one error, containing `fragment`.
#[track_caller]
fn assert_one_error(errors: &[String], fragment: &str) {
    assert_eq!(errors.len(), 1, "expected one error containing `{fragment}`, got {errors:#?}");
    assert!(errors[0].contains(fragment), "error `{}` does not contain `{fragment}`", errors[0]);
}
