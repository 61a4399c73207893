//! What the fuzzer found, one test each, so each stays fixed.

use super::mutate::Input;
use super::{check, Outcome};
use crate::codegen::ast::FnKind;

#[track_caller]
fn holds(kind: FnKind, attr: &str, item: &str) -> Outcome {
    let input = Input { kind, attr: attr.into(), item: item.into() };
    let outcome = check(&input).unwrap_or_else(|problem| panic!("{problem}"));
    proc_macro2::extra::invalidate_current_thread_spans();
    outcome
}

/// `#[kernel(types)]`, `#[device_fn(gin_signals, 3)]`: syn reported the argument that ends early at the call site.
#[test]
fn attribute_arguments_that_end_early_are_located() {
    assert_eq!(holds(FnKind::Kernel, "types", "fn k(out: &mut [u32]) {}"), Outcome::Rejected);
    assert_eq!(holds(FnKind::DeviceFn, "gin_signals , 99", "fn k(out: &mut [u32]) {}"), Outcome::Rejected);
    assert_eq!(holds(FnKind::Kernel, "launch_bounds", "fn k(out: &mut [u32]) {}"), Outcome::Rejected);
    assert_eq!(holds(FnKind::Kernel, "types(f32),, debug_", "fn k<T: Float>(out: &mut [T]) {}"), Outcome::Rejected);
}

/// `#[device_fn] pub`: the item ends before it is a function; syn's "unexpected end of input" had no location.
#[test]
fn an_item_that_ends_early_is_located() {
    assert_eq!(holds(FnKind::DeviceFn, "", "pub"), Outcome::Rejected);
    assert_eq!(holds(FnKind::Kernel, "", "pub fn k()"), Outcome::Rejected);
    // A return type whose generic arguments run to the end of the item: syn said "expected `,`" at the call site.
    assert_eq!(holds(FnKind::Kernel, "", "fn is_even(n: u32) -> bool < { if n = 0 { } }"), Outcome::Rejected);
    // No item at all (rustc never passes one; the fuzzer does): the attribute is the only place to point at.
    assert_eq!(holds(FnKind::Kernel, "y [0] = 1i8 _later", ""), Outcome::Rejected);
}

/// `else { ; }`: an empty statement was "not supported" (at no location); Rust allows it, and so does the macro.
#[test]
fn empty_statements_are_nothing() {
    assert_eq!(
        holds(FnKind::Kernel, "", "fn k(out: &mut [u32], a: u32) { ; if a > 2 { out[0] = 1; } else { ; } ; }"),
        Outcome::Accepted
    );
}

/// A raw identifier as a callee (`r#match()`) panicked building the alias `r#match_must_be_a_weft_device_fn`;
/// kernels named like C++ keywords or raw identifiers got entry points C++ cannot name.
#[test]
fn raw_and_reserved_names_are_valid_in_cpp_and_rust() {
    assert_eq!(
        holds(FnKind::Kernel, "", "fn k(out: &mut [u32]) { let n = r#match(); out[0] = n; }"),
        Outcome::Accepted
    );
    assert_eq!(holds(FnKind::Kernel, "", "fn r#match(out: &mut [u32]) { out[0] = 1; }"), Outcome::Accepted);
    assert_eq!(holds(FnKind::Kernel, "", "fn float(out: &mut [u32]) { out[0] = 1; }"), Outcome::Accepted);
    assert_eq!(holds(FnKind::DeviceFn, "", "fn r#class(x: u32) -> u32 { x }"), Outcome::Accepted);
    // A name the translation renames for itself (`weft_…` → `weft_…_`) is a fine entry point.
    assert_eq!(holds(FnKind::Kernel, "", "fn weft_tuple2(out: &mut [u32]) { out[0] = 1; }"), Outcome::Accepted);
}
