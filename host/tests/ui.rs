//! Misuse the types must reject: each case in tests/ui must fail to compile with the recorded message.

#[test]
fn misuse_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
