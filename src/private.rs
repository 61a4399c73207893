//! Items only the expansions of `#[weft::kernel]` and `#[weft::device_fn]` use: not an API, and hidden from the docs.
//!
//! A kernel pastes the C++ of every device fn it calls into its own source, and lets the resources and
//! capabilities they use size its launch. It finds them through the companion module `#[device_fn]` writes next to
//! the function, by name. A name is no proof: safe code can write a module of that name with constants of its own.
//! So what a kernel takes from a companion is a [`DeviceFn`], which only an `unsafe` call makes: the macro's
//! expansion makes one (rustc does not apply `unsafe_code` to what an external macro writes), a crate under
//! `#![forbid(unsafe_code)]` cannot, and a crate that writes `unsafe` takes on the contract below.
//! (`tests/ui/forged_companion.rs` is each attempt, refused.)

/// The C++ definition `#[weft::device_fn]` generated for one function, with the capabilities, resources and
/// collectives it uses (its callees' included): what a kernel that calls the function pastes into its source and
/// adds to its own usage.
#[derive(Debug, Clone, Copy)]
pub struct DeviceFn {
    name: &'static str,
    source: &'static str,
    usage: &'static [u32],
}

impl DeviceFn {
    /// # Safety
    ///
    /// Only the expansion of `#[weft::device_fn]` calls this. Kernels run `source` unchecked, and size and check
    /// their launches by `usage`, so the caller promises:
    /// - `source` is the C++ that `#[weft::device_fn]` generated from a function named `name` that rustc
    ///   type-checked, after the sources of the device fns it calls: every memory access in it stays in bounds or
    ///   is checked on the device, and it defines nothing but that function (and the callees' definitions);
    /// - `usage` is what the macro recorded of that function and its callees: its capabilities, the resource
    ///   indices it uses, whether it has accesses checked on the device, and its block- and warp-wide collectives.
    pub const unsafe fn new(name: &'static str, source: &'static str, usage: &'static [u32]) -> DeviceFn {
        DeviceFn { name, source, usage }
    }

    /// The Rust name of the function (without `r#`).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Its C++ definition, after those of the device fns it calls.
    pub const fn source(&self) -> &'static str {
        self.source
    }

    /// Its usage words (a format private to `weft-macros`).
    pub const fn usage(&self) -> &'static [u32] {
        self.usage
    }
}

/// Whether two strings are equal, in a constant (the check that a companion belongs to the function it is named
/// after).
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}
