//! The README's program is real: its two Rust blocks, the kernel and the host code, are exactly
//! `examples/00_readme.rs` (after its doc comment), which `cargo test` builds. Editing one without the other fails here.

#[test]
fn the_readme_program_is_the_readme_example() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/00_readme.rs")).unwrap();
    let blocks: Vec<&str> = readme
        .split("```rust\n")
        .skip(1)
        .map(|rest| rest.split("```\n").next().expect("a closed block"))
        .take(2)
        .collect();
    assert_eq!(blocks.len(), 2, "the README starts with two rust blocks: the kernel, then the host code");
    let code: String =
        example.lines().skip_while(|l| l.starts_with("//!") || l.is_empty()).collect::<Vec<_>>().join("\n");
    assert_eq!(format!("{}\n{}", blocks[0], blocks[1]).trim_end(), code.trim_end());
}
