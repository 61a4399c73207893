//! Every Rust vocabulary item has its C++ namesake in weft.cuh (the macro's translation is a name copy, so a name
//! missing on the C++ side is a kernel that type-checks and then fails in nvcc). Needs no toolchain.

use std::collections::BTreeSet;
use std::path::Path;

/// Rust items that deliberately have no C++ function of the same name.
const HOST_ONLY: &[&str] = &[
    "device_only", // the host body of every item
    "new",         // SharedArray::new is rule R12: a __shared__ declaration
    "of",          // Capabilities: host-side values
    "union",
    "includes",
    "missing_from",
    "marker_name",
];

/// Trait methods (not `pub fn`) that kernels call; R10 lowers the scalar ones to free functions of the same name.
const TRAIT_METHODS: &[&str] = &[
    "zero",
    "one",
    "from_f32",
    "to_f32",
    "sqrt",
    "rsqrt",
    "exp",
    "ln",
    "tanh",
    "mul_add",
    "min",
    "max",
    "abs",
    "thread_rank",
    "size",
    "sync",
];

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn public_fn_names(src: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = src;
    while let Some(at) = rest.find("pub fn ") {
        let tail = &rest[at + "pub fn ".len()..];
        let name: String = tail.chars().take_while(|&c| is_ident_char(c)).collect();
        names.push(name);
        rest = tail;
    }
    names
}

fn header_has_identifier(header: &str, name: &str) -> bool {
    header.match_indices(name).any(|(at, _)| {
        let before = header[..at].chars().next_back();
        let after = header[at + name.len()..].chars().next();
        !before.is_some_and(is_ident_char) && !after.is_some_and(is_ident_char)
    })
}

#[test]
fn every_rust_item_has_a_cpp_namesake() {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&src_dir).expect("device/src") {
        let path = entry.expect("dir entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            names.extend(public_fn_names(&std::fs::read_to_string(&path).expect("read source")));
        }
    }
    names.extend(TRAIT_METHODS.iter().map(|s| s.to_string()));
    assert!(names.len() > 100, "found only {} names: is the scan broken?", names.len());
    let missing: Vec<_> = names
        .iter()
        .filter(|n| !HOST_ONLY.contains(&n.as_str()))
        .filter(|n| !header_has_identifier(weft_device::WEFT_CUH, n))
        .collect();
    assert!(missing.is_empty(), "weft.cuh lacks C++ items named {missing:?}");
}

#[test]
fn every_vocabulary_type_has_a_cpp_namesake() {
    for name in [
        "DevComm",
        "Team",
        "Window",
        "Slice",
        "SliceMut",
        "SharedArray",
        "Thread",
        "Warp",
        "Cta",
        "Lanes",
        "WarpSpan",
        "Order",
        "Scope",
        "BarrierResult",
        "LsaBarrier",
        "GinBarrier",
        "HybridBarrier",
        "GinSession",
        "LlA2a",
        "LlA2aHandle",
        "MultimemView",
        "NoAction",
        "SignalInc",
        "SignalAdd",
        "StrongSignalInc",
        "WeakSignalInc",
        "StrongSignalAdd",
        "WeakSignalAdd",
        "VaSignalInc",
        "VaSignalAdd",
        "StrongVaSignalInc",
        "WeakVaSignalInc",
        "StrongVaSignalAdd",
        "WeakVaSignalAdd",
        "CounterInc",
        "WeakCounterInc",
        "WARP_SIZE",
        "Relaxed",
        "Acquire",
        "Release",
        "AcqRel",
        "SeqCst",
        "Block",
        "Device",
        "System",
        "Ok",
        "TimedOut",
        "Aborted",
        "View",
    ] {
        assert!(header_has_identifier(weft_device::WEFT_CUH, name), "weft.cuh lacks `{name}`");
    }
}
