//! Rust identifiers that C++ reserves.

/// C++ keywords and CUDA built-ins a Rust identifier may spell.
const RESERVED: &[&str] = &[
    "alignas",
    "alignof",
    "and",
    "and_eq",
    "asm",
    "auto",
    "bitand",
    "bitor",
    "bool",
    "case",
    "catch",
    "char",
    "char16_t",
    "char32_t",
    "char8_t",
    "class",
    "compl",
    "concept",
    "const_cast",
    "consteval",
    "constexpr",
    "constinit",
    "co_await",
    "co_return",
    "co_yield",
    "decltype",
    "default",
    "delete",
    "double",
    "dynamic_cast",
    "explicit",
    "export",
    "float",
    "friend",
    "goto",
    "inline",
    "int",
    "long",
    "mutable",
    "namespace",
    "new",
    "noexcept",
    "not",
    "not_eq",
    "nullptr",
    "operator",
    "or",
    "or_eq",
    "private",
    "protected",
    "public",
    "register",
    "reinterpret_cast",
    "requires",
    "short",
    "signed",
    "sizeof",
    "static_assert",
    "static_cast",
    "switch",
    "template",
    "this",
    "thread_local",
    "throw",
    "try",
    "typedef",
    "typeid",
    "typename",
    "union",
    "unsigned",
    "using",
    "virtual",
    "void",
    "volatile",
    "wchar_t",
    "xor",
    "xor_eq",
    "threadIdx",
    "blockIdx",
    "blockDim",
    "gridDim",
    "warpSize",
    "main",
    "NULL",
];

/// Whether C++ (or CUDA) reserves `name`.
pub(crate) fn is_reserved(name: &str) -> bool {
    RESERVED.contains(&name) || name.starts_with("__")
}

/// The C++ spelling of a Rust identifier: itself, or `name_` when C++ reserves it. Raw identifiers (`r#type`)
/// lose their prefix.
pub(crate) fn cpp_ident(rust: &str) -> String {
    let rust = rust.strip_prefix("r#").unwrap_or(rust);
    if is_reserved(rust) || rust.starts_with("weft_") {
        format!("{rust}_")
    } else {
        rust.to_string()
    }
}
