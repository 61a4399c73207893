//! UI tests for `#[weft::kernel]`: each `tests/ui/*.rs` must fail to compile with the error in the `.stderr` next to
//! it (regenerate with `TRYBUILD=overwrite cargo test -p weft --test ui`, then read the diff); each
//! `tests/ui/pass/*.rs` must build and run. macros/tests/nvcc.rs compiles the C++ of every kernel this suite accepts.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
