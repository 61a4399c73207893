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

/// `marker!(Shuffle: f16, bf16, …)` and `native_float!(f32, f64)` + `half_float!(f16, bf16)` in weft-device's
/// numeric.rs say which types implement each
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
            // `native_float!(f32, f64)` and `half_float!(f16, bf16)` implement `Float`.
            "native_float" | "half_float" => match found.iter_mut().find(|(n, _)| n == "Float") {
                Some((_, types)) => types.extend(tokens.iter().cloned()),
                None => found.push(("Float".into(), tokens.clone())),
            },
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
/// its own public traits declare (`LoadPack::load_pack`, `Float::sqrt`; not a private helper's, `InF32::in_f32`).
#[derive(Default)]
struct Methods(Vec<String>);

impl<'ast> Visit<'ast> for Methods {
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if !matches!(t.vis, syn::Visibility::Public(_)) {
            return;
        }
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

/// One method (or associated function) of a vocabulary type as weft-device declares it.
#[derive(Debug, Clone)]
struct Declared {
    /// The type's Rust name (`"[T]"` for slices).
    ty: String,
    name: String,
    /// Arguments besides the receiver.
    arity: usize,
    /// `None`: an associated function; `Some(true)`: `&mut self`.
    receiver: Option<bool>,
    /// The result type's last identifier (`"()"`, `"u32"`, `"T"`, `"LsaBarrier"`, `"[T]"`, `"mut [T]"`).
    ret: String,
}

fn type_name(ty: &syn::Type) -> String {
    match crate::codegen::types::strip_group(ty) {
        syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default(),
        syn::Type::Slice(_) => "[T]".into(),
        syn::Type::Reference(r) => {
            let inner = type_name(&r.elem);
            if r.mutability.is_some() {
                format!("mut {inner}")
            } else {
                inner
            }
        }
        syn::Type::Tuple(t) if t.elems.is_empty() => "()".into(),
        _ => "?".into(),
    }
}

/// Methods and associated functions of weft-device's inherent impls, and of its vocabulary traits' impls.
#[derive(Default)]
struct Api {
    declared: Vec<Declared>,
    traits: Vec<(String, Vec<syn::TraitItemFn>)>,
    trait_impls: Vec<(String, String)>,
}

fn declared_fn(ty: &str, sig: &syn::Signature) -> Declared {
    let receiver = sig.receiver().map(|r| r.mutability.is_some());
    let arity = sig.inputs.len() - usize::from(receiver.is_some());
    let ret = match &sig.output {
        syn::ReturnType::Default => "()".into(),
        syn::ReturnType::Type(_, t) => type_name(t),
    };
    Declared { ty: ty.into(), name: sig.ident.to_string(), arity, receiver, ret }
}

impl<'ast> Visit<'ast> for Api {
    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        let fns = t
            .items
            .iter()
            .filter_map(|i| match i {
                syn::TraitItem::Fn(f) => Some(f.clone()),
                _ => None,
            })
            .collect();
        self.traits.push((t.ident.to_string(), fns));
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        let ty = type_name(&i.self_ty);
        if let Some((_, path, _)) = &i.trait_ {
            let name = path.segments.last().map(|s| s.ident.to_string()).unwrap_or_default();
            self.trait_impls.push((name, ty));
            return;
        }
        for item in &i.items {
            if let syn::ImplItem::Fn(f) = item {
                if matches!(f.vis, syn::Visibility::Public(_)) {
                    self.declared.push(declared_fn(&ty, &f.sig));
                }
            }
        }
    }
}

/// weft-device's kernel API, vocabulary traits' methods included (`LoadPack::load_pack` on slices and views, the
/// `Coop` methods on every coop).
fn device_api() -> Vec<Declared> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../device/src");
    let mut api = Api::default();
    for entry in std::fs::read_dir(&dir).expect("device/src") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            api.visit_file(&syn::parse_file(&std::fs::read_to_string(&path).expect("read")).expect("parses"));
        }
    }
    let mut out = api.declared;
    for (trait_name, ty) in &api.trait_impls {
        if let Some((_, fns)) = api.traits.iter().find(|(t, _)| t == trait_name) {
            if ["LoadPack", "StorePack", "LoadWide", "StoreWide"].contains(&trait_name.as_str()) {
                out.extend(fns.iter().map(|f| declared_fn(ty, &f.sig)));
            }
        }
    }
    // `coop!` implements `Coop` for these (a macro, which the visitor does not expand).
    let (_, coop_fns) = api.traits.iter().find(|(t, _)| t == "Coop").expect("trait Coop");
    for ty in ["Thread", "Warp", "Cta", "Lanes", "WarpSpan"] {
        out.extend(coop_fns.iter().map(|f| declared_fn(ty, &f.sig)));
    }
    // Host-side values, never kernel values: capability sets, the iterator behind `for … in grid_stride(n)`.
    out.retain(|d| !["Capabilities", "GridStride"].contains(&d.ty.as_str()));
    out
}

/// The macro's types for a Rust receiver type, with elements of `f32`.
fn receivers(ty: &str, mutable: bool) -> Vec<crate::codegen::types::Ty> {
    use crate::codegen::types::{Container, Scalar, Ty, Vocab};
    let f32_ = || Box::new(Ty::Scalar(Scalar::F32));
    match ty {
        "DevComm" => vec![Ty::DevComm],
        "Window" => vec![Ty::Window(f32_())],
        "WindowView" => vec![Ty::Indexable(Container::View, f32_())],
        "SharedArray" => vec![Ty::Indexable(Container::Shared, f32_())],
        "[T]" | "[f32]" if mutable => vec![Ty::Indexable(Container::SliceMut, f32_())],
        "[T]" | "[f32]" => vec![Ty::Indexable(Container::Slice, f32_()), Ty::Indexable(Container::SliceMut, f32_())],
        "Pack" | "WidePack" | "MultimemView" => {
            vec![Ty::Vocab(Vocab::from_name(ty).expect("vocabulary type"), Some(f32_()))]
        }
        other => vec![Ty::Vocab(
            Vocab::from_name(other).unwrap_or_else(|| panic!("`{other}` has methods but is not a vocabulary type")),
            None,
        )],
    }
}

/// How the macro's result type reads in weft-device's spelling (elements and turbofish types are `f32` here).
fn shape(ty: &crate::codegen::types::Ty) -> String {
    use crate::codegen::types::{Container, Ty};
    match ty {
        Ty::Scalar(s) => s.rust().into(),
        Ty::Unit => "()".into(),
        Ty::Vocab(v, _) => v.name().into(),
        Ty::Window(_) => "Window".into(),
        Ty::DevComm => "DevComm".into(),
        Ty::Indexable(Container::View, _) => "WindowView".into(),
        Ty::Indexable(Container::Slice, _) => "[T]".into(),
        Ty::Indexable(Container::SliceMut, _) => "mut [T]".into(),
        other => format!("{other:?}"),
    }
}

#[test]
fn every_vocabulary_method_resolves_on_its_type_with_its_result_type() {
    use crate::codegen::lower::methods::{associated_fn, method};
    use crate::codegen::types::{Scalar, Ty, Vocab};
    let api = device_api();
    assert!(api.len() > 80, "found only {} methods: is the scan broken?", api.len());
    let f32_ = Ty::Scalar(Scalar::F32);
    let mut wrong = Vec::new();
    for d in &api {
        let rust_ret = match d.ret.as_str() {
            "T" | "F" => "f32".to_string(),
            "Self" => d.ty.clone(),
            other => other.to_string(),
        };
        let results: Vec<Option<Ty>> = match d.receiver {
            Some(mutable) => receivers(&d.ty, mutable)
                .iter()
                .map(|r| method(r, &d.name, d.arity, Some(&f32_)).map(|m| m.ret))
                .collect(),
            None if d.name == "new" && d.ty == "SharedArray" => continue, // R12: a `__shared__` declaration
            None => {
                let v = Vocab::from_name(&d.ty).unwrap_or_else(|| panic!("`{}` is not a vocabulary type", d.ty));
                // `Pack::<f32>::splat`: the element comes from the type arguments, which the lowering adds.
                vec![associated_fn(v, &d.name, d.arity).map(|m| match m.ret {
                    Ty::Vocab(v @ (Vocab::Pack | Vocab::WidePack), None) => Ty::Vocab(v, Some(Box::new(f32_.clone()))),
                    ret => ret,
                })]
            }
        };
        for result in results {
            match result {
                None => wrong.push(format!("{}::{} ({} arguments) does not resolve", d.ty, d.name, d.arity)),
                Some(ty) if shape(&ty) != rust_ret => {
                    wrong.push(format!("{}::{} returns `{}`, the macro says `{}`", d.ty, d.name, rust_ret, shape(&ty)))
                }
                Some(_) => {}
            }
        }
    }
    assert!(wrong.is_empty(), "update macros/src/codegen/lower/methods.rs:\n{}", wrong.join("\n"));
}

#[test]
fn the_method_table_has_nothing_the_device_crate_lacks() {
    use crate::codegen::lower::methods::{associated_fn, method};
    use crate::codegen::types::{Container, Scalar, Ty, Vocab};
    use crate::codegen::vocabulary::ACTIONS;
    let api = device_api();
    let f32_ = || Box::new(Ty::Scalar(Scalar::F32));
    let mut types: Vec<(String, Ty)> = vec![
        ("DevComm".into(), Ty::DevComm),
        ("Window".into(), Ty::Window(f32_())),
        ("WindowView".into(), Ty::Indexable(Container::View, f32_())),
        ("SharedArray".into(), Ty::Indexable(Container::Shared, f32_())),
        ("[T]".into(), Ty::Indexable(Container::Slice, f32_())),
        ("[T]".into(), Ty::Indexable(Container::SliceMut, f32_())),
    ];
    for name in [
        "Team",
        "LsaBarrier",
        "GinBarrier",
        "HybridBarrier",
        "BarrierResult",
        "GinSession",
        "LlA2a",
        "LlA2aHandle",
        "MultimemView",
        "Pack",
        "WidePack",
        "Thread",
        "Warp",
        "Cta",
        "Lanes",
        "WarpSpan",
        "Order",
        "Scope",
    ]
    .into_iter()
    .chain(ACTIONS.iter().map(|(a, _)| *a))
    {
        types.push((name.into(), Ty::Vocab(Vocab::from_name(name).expect("vocabulary type"), Some(f32_()))));
    }
    let mut names: Vec<&str> = api.iter().map(|d| d.name.as_str()).collect();
    names.extend(["get", "contains", "first", "iter", "swap", "fill", "as_ptr", "eq", "cmp", "into", "to_vec"]);
    let mut invented = Vec::new();
    for (ty_name, ty) in &types {
        for name in &names {
            for arity in 0..=8 {
                // Rust's own slice methods, which `weft::Slice`/`SliceMut` mirror.
                let rusts = ty_name == "[T]" && matches!(*name, "len" | "is_empty") && arity == 0;
                let has = |receiver: bool| {
                    rusts && receiver
                        || api.iter().any(|d| {
                            (d.ty == *ty_name || ty_name == "[T]" && d.ty == "[f32]")
                                && d.name == *name
                                && d.arity == arity
                                && d.receiver.is_some() == receiver
                        })
                };
                if method(ty, name, arity, None).is_some() && !has(true) {
                    invented.push(format!("{ty_name}.{name} with {arity} arguments"));
                }
                if let Ty::Vocab(v, _) = ty {
                    if associated_fn(*v, name, arity).is_some() && !has(false) {
                        invented.push(format!("{ty_name}::{name} with {arity} arguments"));
                    }
                }
            }
        }
    }
    assert!(invented.is_empty(), "the macro resolves methods weft-device does not declare: {invented:?}");
}
