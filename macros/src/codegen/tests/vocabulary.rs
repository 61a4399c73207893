//! The macro's knowledge of the vocabulary stays in step with `weft-device`: every free function and constant the
//! device crate declares is one the macro treats as vocabulary (no device-fn source to look for).

use std::path::Path;

use syn::visit::Visit;

use crate::codegen::lower::known::{SCALAR_METHODS, VOCABULARY_METHODS};
use crate::codegen::lower::{is_vocabulary_function, VOCABULARY_CONSTANTS};

#[derive(Default)]
struct FreeItems {
    functions: Vec<String>,
    constants: Vec<String>,
}

impl<'ast> Visit<'ast> for FreeItems {
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if matches!(f.vis, syn::Visibility::Public(_)) {
            self.functions.push(f.sig.ident.to_string());
        }
    }
    fn visit_item_const(&mut self, c: &'ast syn::ItemConst) {
        if matches!(c.vis, syn::Visibility::Public(_)) {
            self.constants.push(c.ident.to_string());
        }
    }
    // Methods are not free functions; macros (`capability_set!`) define types.
    fn visit_item_impl(&mut self, _: &'ast syn::ItemImpl) {}
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if m.ident != "tests" && m.ident != "prelude" {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

#[test]
fn every_free_vocabulary_function_and_constant_is_known() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/src");
    let mut items = FreeItems::default();
    for entry in std::fs::read_dir(&dir).expect("device/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            items.visit_file(&file);
        }
    }
    assert!(items.functions.len() > 20, "found only {:?}", items.functions);
    let unknown: Vec<&String> = items.functions.iter().filter(|f| !is_vocabulary_function(f)).collect();
    assert!(
        unknown.is_empty(),
        "weft-device declares free functions the macro does not know as vocabulary: {unknown:?}; add them to \
         VOCABULARY_FUNCTIONS in macros/src/codegen/lower/known.rs (else kernels calling them look for a device-fn \
         companion module)"
    );
    let kernel_constants: Vec<&String> = items
        .constants
        .iter()
        .filter(|c| !c.starts_with("WEFT_CUH"))
        .filter(|c| !VOCABULARY_CONSTANTS.contains(&c.as_str()))
        .collect();
    assert!(
        kernel_constants.is_empty(),
        "weft-device declares constants the macro rejects in kernels: {kernel_constants:?}; add them to \
         VOCABULARY_CONSTANTS in macros/src/codegen/lower/expr.rs"
    );
}

/// `marker!(Shuffle: f16, bf16, …)` and `float!(f32, …)` in weft-device's numeric.rs say which types implement each
/// narrowing trait; the macro's default instantiation lists depend on the same sets.
#[test]
fn trait_type_sets_match_the_device_crate() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/src/numeric.rs");
    let text = std::fs::read_to_string(&path).expect("numeric.rs");
    let file = syn::parse_file(&text).expect("parses");
    let mut found: Vec<(String, Vec<String>)> = Vec::new();
    for item in &file.items {
        let syn::Item::Macro(m) = item else { continue };
        let name = m.mac.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
        let tokens: Vec<String> = m.mac.tokens.to_string().split([',', ':']).map(|t| t.trim().to_string()).collect();
        match name.as_str() {
            "marker" => found.push((tokens[0].clone(), tokens[1..].to_vec())),
            "float" => found.push(("Float".into(), tokens.clone())),
            _ => {}
        }
    }
    for (name, types) in crate::codegen::ast::TRAIT_TYPES {
        let (_, device) = found.iter().find(|(n, _)| n == name).unwrap_or_else(|| panic!("no impls of {name} found"));
        let mut ours: Vec<&str> = types.iter().map(|s| s.rust()).collect();
        let mut theirs: Vec<&str> = device.iter().map(String::as_str).filter(|s| !s.is_empty()).collect();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs, "{name}: update TRAIT_TYPES in macros/src/codegen/ast.rs");
    }
}

/// The public methods of weft-device's impl blocks, trait impls excluded (`Index`, `Iterator`, …), and the methods
/// its own traits declare (`LoadPack::load_pack`, `Float::sqrt`).
#[derive(Default)]
struct Methods(Vec<String>);

impl<'ast> Visit<'ast> for Methods {
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        for item in &t.items {
            if let syn::TraitItem::Fn(f) = item {
                if f.sig.receiver().is_some() {
                    self.0.push(f.sig.ident.to_string());
                }
            }
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if i.trait_.is_some() {
            return;
        }
        for item in &i.items {
            if let syn::ImplItem::Fn(f) = item {
                let is_method = f.sig.receiver().is_some();
                if matches!(f.vis, syn::Visibility::Public(_)) && is_method {
                    self.0.push(f.sig.ident.to_string());
                }
            }
        }
    }
}

#[test]
fn every_vocabulary_method_is_known() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/src");
    let mut methods = Methods::default();
    for entry in std::fs::read_dir(&dir).expect("device/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read");
            methods.visit_file(&syn::parse_file(&text).expect("parses"));
        }
    }
    assert!(methods.0.len() > 30, "found only {:?}", methods.0);
    let unknown: Vec<&String> = methods
        .0
        .iter()
        .filter(|m| !VOCABULARY_METHODS.contains(&m.as_str()) && !SCALAR_METHODS.contains(&m.as_str()))
        .collect();
    assert!(
        unknown.is_empty(),
        "weft-device declares methods the macro would reject in kernels: {unknown:?}; add them to \
         VOCABULARY_METHODS in macros/src/codegen/lower/known.rs"
    );
}
