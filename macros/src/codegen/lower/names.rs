//! The C++ names of what the user named. Every identifier of the user's (locals, parameters, loop variables,
//! pattern bindings, labels, type parameters, device fns, kernels) reaches C++ as `rs_<name>`, and every name the
//! translation makes up itself (loop ends, match temporaries, jump labels, a kernel's raw communicator) as
//! `w_<…>`: so a user's name is never a C++ keyword, type, macro or builtin (`float`, `auto`, `T`, `min`, `size_t`,
//! `threadIdx`, `__syncthreads`, `ncclDevComm`, `NULL`…), never one of weft.cuh's or the prelude's (`weft`,
//! `weft_tuple2`), never one of the translation's, and never binds to something else in C++. No header weft includes
//! defines a macro or name that starts with either prefix (macros/tests/nvcc.rs compiles kernels that use such names).

/// The prefix of every user identifier in C++.
pub(crate) const USER: &str = "rs_";

/// The prefix of every name the translation makes up.
pub(crate) const TEMP: &str = "w_";

/// The C++ spelling of a Rust identifier: `rs_` and the name (a raw identifier without its `r#`).
pub(crate) fn cpp_ident(rust: &str) -> String {
    let rust = rust.strip_prefix("r#").unwrap_or(rust);
    format!("{USER}{rust}")
}
