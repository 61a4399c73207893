//! The kernels and device fns written in the repository: those of the examples, the GPU tests and the UI suite's
//! passing cases compile with rustc, so the macro must accept every one of them (it resolves methods by type and
//! rejects what it cannot resolve: this is where a too-strict rule would show). They also seed the fuzzer.

use std::path::{Path, PathBuf};

use proc_macro2::TokenStream;

use crate::codegen::ast::FnKind;
use crate::codegen::ctxt::Ctxt;

/// A `#[kernel]` or `#[device_fn]` as its macro receives it.
#[derive(Clone)]
pub(crate) struct Case {
    pub(crate) file: PathBuf,
    pub(crate) kind: FnKind,
    /// The attribute's arguments.
    pub(crate) attr: TokenStream,
    /// The function without the macro's attribute.
    pub(crate) item: syn::ItemFn,
}

impl Case {
    pub(crate) fn name(&self) -> String {
        format!("{}: {}", self.file.display(), self.item.sig.ident)
    }
}

pub(crate) fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `.rs` files of `dir` (relative to the workspace), sorted.
pub(crate) fn rust_files(dir: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(workspace().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    out.sort();
    out
}

/// Which macro an attribute is, if it is one of ours (`#[weft::kernel(…)]`, `#[kernel]`, `#[weft::device_fn]`).
fn macro_kind(attr: &syn::Attribute) -> Option<FnKind> {
    match attr.path().segments.last()?.ident.to_string().as_str() {
        "kernel" => Some(FnKind::Kernel),
        "device_fn" => Some(FnKind::DeviceFn),
        _ => None,
    }
}

/// Every kernel and device fn among the items of `file` (top level and inline modules).
pub(crate) fn cases_in_file(file: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    cases_in_source(&text, file)
}

/// Every kernel and device fn of Rust source `text` (named `file` in reports).
pub(crate) fn cases_in_source(text: &str, file: &Path) -> Vec<Case> {
    let parsed = syn::parse_file(text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut out = Vec::new();
    collect(file, &parsed.items, &mut out);
    out
}

fn collect(file: &Path, items: &[syn::Item], out: &mut Vec<Case>) {
    for item in items {
        match item {
            syn::Item::Fn(f) => {
                let Some((i, kind)) = f.attrs.iter().enumerate().find_map(|(i, a)| macro_kind(a).map(|k| (i, k)))
                else {
                    continue;
                };
                let attr = match &f.attrs[i].meta {
                    syn::Meta::List(l) => l.tokens.clone(),
                    _ => TokenStream::new(),
                };
                let mut item = f.clone();
                item.attrs.remove(i);
                out.push(Case { file: file.to_path_buf(), kind, attr, item });
            }
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    collect(file, items, out);
                }
            }
            _ => {}
        }
    }
}

/// The cases of the sources whose kernels rustc accepts: the examples' (kit/src/kernels), the GPU tests'
/// (kit/src/test_kernels.rs), UI passes.
pub(crate) fn accepted_sources() -> Vec<Case> {
    let mut files = rust_files("kit/src/kernels");
    files.push(workspace().join("kit/src/test_kernels.rs"));
    files.extend(rust_files("tests/ui/pass"));
    files.iter().flat_map(|f| cases_in_file(f)).collect()
}

/// Every error message of one case.
pub(crate) fn errors_of(case: &Case) -> Vec<syn::Error> {
    let cx = Ctxt::new();
    let _ = crate::codegen::analyze(case.kind, case.attr.clone(), &case.item, super::OPTIONS, &cx);
    cx.into_errors()
}

#[test]
fn every_kernel_rustc_accepts_in_the_repository_is_accepted() {
    let cases = accepted_sources();
    assert!(cases.len() > 15, "found only {} kernels and device fns: is the scan broken?", cases.len());
    let mut refused = Vec::new();
    for case in &cases {
        let errors = errors_of(case);
        if !errors.is_empty() {
            let messages: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
            refused.push(format!("{}\n    {}", case.name(), messages.join("\n    ")));
        }
    }
    assert!(refused.is_empty(), "the macro refuses kernels that rustc accepts:\n{}", refused.join("\n"));
}
