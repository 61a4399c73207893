//! Rust types → C++ types (docs/kernel-abi.md's table, docs/vocabulary.md's R2–R5), and the small type model the
//! lowering uses to type literals and pick C++ spellings.

use syn::{GenericArgument, PathArguments, Type};

use super::ctxt::Ctxt;
pub(crate) use super::vocabulary::Vocab;

/// A Rust scalar with a C++ spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scalar {
    Bool,
    I8,
    I16,
    I32,
    I64,
    Isize,
    U8,
    U16,
    U32,
    U64,
    Usize,
    F16,
    Bf16,
    F32,
    F64,
}

impl Scalar {
    pub(crate) const ALL: [Scalar; 15] = [
        Scalar::Bool,
        Scalar::I8,
        Scalar::I16,
        Scalar::I32,
        Scalar::I64,
        Scalar::Isize,
        Scalar::U8,
        Scalar::U16,
        Scalar::U32,
        Scalar::U64,
        Scalar::Usize,
        Scalar::F16,
        Scalar::Bf16,
        Scalar::F32,
        Scalar::F64,
    ];

    /// The types a generic kernel bounded by `Float` is instantiated for unless `types(…)` says otherwise.
    pub(crate) const FLOAT_DEFAULT: &'static [Scalar] = &[Scalar::F32, Scalar::Bf16];
    /// The same for `Element` / `Numeric` bounds.
    pub(crate) const ELEMENT_DEFAULT: &'static [Scalar] =
        &[Scalar::F32, Scalar::Bf16, Scalar::F16, Scalar::F64, Scalar::I32, Scalar::U32, Scalar::I64, Scalar::U64];

    pub(crate) fn from_name(name: &str) -> Option<Scalar> {
        Scalar::ALL.into_iter().find(|s| s.rust() == name)
    }

    pub(crate) fn rust(self) -> &'static str {
        match self {
            Scalar::Bool => "bool",
            Scalar::I8 => "i8",
            Scalar::I16 => "i16",
            Scalar::I32 => "i32",
            Scalar::I64 => "i64",
            Scalar::Isize => "isize",
            Scalar::U8 => "u8",
            Scalar::U16 => "u16",
            Scalar::U32 => "u32",
            Scalar::U64 => "u64",
            Scalar::Usize => "usize",
            Scalar::F16 => "f16",
            Scalar::Bf16 => "bf16",
            Scalar::F32 => "f32",
            Scalar::F64 => "f64",
        }
    }

    pub(crate) fn cpp(self) -> &'static str {
        match self {
            Scalar::Bool => "bool",
            Scalar::I8 => "int8_t",
            Scalar::I16 => "int16_t",
            Scalar::I32 => "int32_t",
            Scalar::I64 => "int64_t",
            Scalar::Isize => "ptrdiff_t",
            Scalar::U8 => "uint8_t",
            Scalar::U16 => "uint16_t",
            Scalar::U32 => "uint32_t",
            Scalar::U64 => "uint64_t",
            Scalar::Usize => "size_t",
            Scalar::F16 => "__half",
            Scalar::Bf16 => "__nv_bfloat16",
            Scalar::F32 => "float",
            Scalar::F64 => "double",
        }
    }

    pub(crate) fn is_float(self) -> bool {
        matches!(self, Scalar::F16 | Scalar::Bf16 | Scalar::F32 | Scalar::F64)
    }

    pub(crate) fn is_integer(self) -> bool {
        !self.is_float() && self != Scalar::Bool
    }

    /// C++ promotes these to `int` in arithmetic, so results are cast back to keep Rust's type.
    pub(crate) fn promotes(self) -> bool {
        matches!(self, Scalar::I8 | Scalar::I16 | Scalar::U8 | Scalar::U16)
    }

    /// The C++ spelling of an integer literal (decimal digits or `0x…`) of this type.
    pub(crate) fn int_literal(self, digits: &str) -> String {
        match self {
            Scalar::I32 => digits.to_string(),
            Scalar::U32 => format!("{digits}u"),
            Scalar::I64 => format!("{digits}ll"),
            Scalar::U64 => format!("{digits}ull"),
            Scalar::F32 => format!("{digits}.0f"),
            Scalar::F64 => format!("{digits}.0"),
            Scalar::Bool => if digits == "0" { "false" } else { "true" }.to_string(),
            other => format!("{}({digits})", other.cpp()),
        }
    }

    /// The C++ spelling of a float literal (`1.5`, `1e-3`) of this type.
    pub(crate) fn float_literal(self, text: &str) -> String {
        let text = float_text(text);
        match self {
            Scalar::F32 => format!("{text}f"),
            Scalar::F64 => text,
            other => format!("{}({text})", other.cpp()),
        }
    }
}

/// A Rust float literal's digits as a C++ double literal (`1.` → `1.0`, `2e3` stays).
pub(crate) fn float_text(text: &str) -> String {
    let text = text.replace('_', "");
    if text.ends_with('.') {
        format!("{text}0")
    } else if text.contains(['.', 'e', 'E']) {
        text
    } else {
        format!("{text}.0")
    }
}

/// What the lowering knows about an expression's type: literals take the type of what they meet, scalar methods
/// become free functions, indexing yields elements, and methods resolve against the receiver's vocabulary type
/// (a method C++ does not have on that type is an error where it is written, not in nvcc).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ty {
    Scalar(Scalar),
    /// An element type parameter (`T`): the C++ template parameter of the same name.
    Param(String),
    Tuple(Vec<Ty>),
    /// `&[T]` / `&mut [T]`, a `WindowView`, a `SharedArray`: indexing yields the element.
    Indexable(Container, Box<Ty>),
    /// `&Window<T>`.
    Window(Box<Ty>),
    DevComm,
    /// Any other vocabulary type; the element type of `Pack<T>`, `WidePack<T>` and `MultimemView<T>`.
    Vocab(Vocab, Option<Box<Ty>>),
    /// A device fn's `&mut x` parameter: a C++ reference, read and written through `*x`.
    Ref(Box<Ty>),
    /// An untyped literal's type, found by unification (see `lower::infer`).
    Var(usize),
    /// The type of a local declared `auto` from an expression of unknown type: spelled `decltype(name)`.
    Local(usize),
    Unit,
    /// A value the lowering cannot type (a device fn's result, say).
    Unknown,
    /// A value whose expression was already reported as an error: nothing more is said about it, so one mistake
    /// gives one error.
    Error,
}

/// Which indexable vocabulary value: they share indexing but not their methods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Container {
    /// `&[T]`: `weft::Slice<T>`.
    Slice,
    /// `&mut [T]`: `weft::SliceMut<T>`.
    SliceMut,
    /// `WindowView<'_, T>`: `weft::View<T>`.
    View,
    /// `SharedArray<T, N>`.
    Shared,
}

/// Where a type is written: decides references and `DevComm`'s spelling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Position {
    KernelParam,
    DeviceFnParam,
    Local,
    Return,
}

/// The generic parameters in scope: element parameters are C++ template parameters, capability parameters
/// exist only in Rust.
#[derive(Clone, Debug, Default)]
pub(crate) struct GenericNames {
    pub(crate) elements: Vec<String>,
    pub(crate) capabilities: Vec<String>,
    /// Element parameters replaced by a concrete type (entry points of generic kernels).
    pub(crate) substitute: Vec<(String, Scalar)>,
    /// Type parameters bounded by `Coop` (device fns only: kernels instantiate element types): template parameters
    /// whose values have the coop methods.
    pub(crate) coops: Vec<String>,
}

/// Host-side types a kernel cannot use, with what to write instead.
fn host_type_advice(name: &str) -> Option<&'static str> {
    Some(match name {
        "Vec" | "Box" | "Rc" | "Arc" | "HashMap" | "BTreeMap" | "VecDeque" | "HashSet" => {
            "kernels cannot allocate: take a `&[T]`/`&mut [T]` or `&Window<T>` parameter, or use \
             `SharedArray<T, N>` for per-block scratch"
        }
        "String" | "str" => "kernels have no strings: pass numbers",
        "Option" | "Result" => "kernels have no `Option`/`Result`: use a `bool` flag or a sentinel value",
        "Cell" | "RefCell" | "Mutex" | "RwLock" => "use `let mut` locals, or the atomics of the vocabulary",
        "Self" => "`Self` has no meaning in a kernel: name the type",
        _ => return None,
    })
}

fn is_vocabulary_path_prefix(segment: &str) -> bool {
    matches!(segment, "weft" | "weft_device" | "device" | "prelude" | "half" | "crate" | "self" | "super")
}

/// Maps Rust types to C++ type spellings, reporting every unsupported type.
pub(crate) struct TypeMapper<'a> {
    pub(crate) generics: &'a GenericNames,
    pub(crate) cx: &'a Ctxt,
}

impl TypeMapper<'_> {
    /// The C++ spelling of `ty` written at `pos`, and what the lowering knows about values of it. `None` after an
    /// error was reported.
    pub(crate) fn map(&self, ty: &Type, pos: Position) -> Option<(String, Ty)> {
        match ty {
            Type::Paren(p) => self.map(&p.elem, pos),
            Type::Group(g) => self.map(&g.elem, pos),
            Type::Reference(r) => self.map_reference(ty, r, pos),
            Type::Path(p) => self.map_path(ty, p, pos),
            Type::Tuple(t) if t.elems.is_empty() => Some(("void".into(), Ty::Unit)),
            Type::Tuple(t) => {
                if t.elems.len() > MAX_TUPLE {
                    self.cx.error_spanned_by(
                        ty,
                        format!("tuples in kernels have at most {MAX_TUPLE} elements; split it or return fewer values"),
                    );
                    return None;
                }
                let mut cpp = Vec::new();
                let mut tys = Vec::new();
                let mut ok = true;
                for elem in &t.elems {
                    match self.map(elem, Position::Local) {
                        Some((c, t)) => {
                            cpp.push(c);
                            tys.push(t);
                        }
                        None => ok = false,
                    }
                }
                ok.then(|| (format!("weft_tuple{}<{}>", cpp.len(), cpp.join(", ")), Ty::Tuple(tys)))
            }
            Type::Array(_) => {
                self.cx.error_spanned_by(
                    ty,
                    "arrays are not supported in kernels: use `SharedArray<T, N>` for per-block scratch, a slice \
                     parameter, or separate scalar locals",
                );
                None
            }
            Type::Slice(_) => {
                self.cx.error_spanned_by(ty, "an unsized slice cannot be a value: write `&[T]` or `&mut [T]`");
                None
            }
            Type::Ptr(_) => {
                self.cx.error_spanned_by(
                    ty,
                    "raw pointers are not supported in kernels: take `&[T]`, `&mut [T]` or `&Window<T>`",
                );
                None
            }
            Type::TraitObject(_) | Type::ImplTrait(_) => {
                self.cx.error_spanned_by(
                    ty,
                    "trait objects and `impl Trait` are not supported in kernels: make the function generic over a \
                     type parameter (`fn f<T: Float>(x: T)`)",
                );
                None
            }
            Type::BareFn(_) => {
                self.cx.error_spanned_by(
                    ty,
                    "function pointers are not supported in kernels: call a #[weft::device_fn] directly",
                );
                None
            }
            Type::Never(_) => {
                self.cx.error_spanned_by(ty, "`!` is not supported in kernels: return `()`");
                None
            }
            Type::Infer(_) => Some(("auto".into(), Ty::Unknown)),
            Type::Macro(_) => {
                self.cx.error_spanned_by(ty, "type macros are not supported in kernels: write the type out");
                None
            }
            _ => {
                self.cx.error_spanned_by(ty, "this type is not supported in kernels");
                None
            }
        }
    }

    fn map_reference(&self, ty: &Type, r: &syn::TypeReference, pos: Position) -> Option<(String, Ty)> {
        let mutable = r.mutability.is_some();
        let inner = strip_group(&r.elem);
        if let Type::Slice(s) = inner {
            // `let s: &[T] = …` only binds a slice value, which is cheap to copy in C++ too.
            let (elem, elem_ty) = self.map(&s.elem, Position::Local)?;
            let (cpp, container) = if mutable {
                (format!("weft::SliceMut<{elem}>"), Container::SliceMut)
            } else {
                (format!("weft::Slice<{elem}>"), Container::Slice)
            };
            return Some((cpp, Ty::Indexable(container, Box::new(elem_ty))));
        }
        if let Type::Path(p) = inner {
            if let Some(last) = p.path.segments.last() {
                let name = last.ident.to_string();
                if name == "str" {
                    self.cx.error_spanned_by(ty, "kernels have no strings: pass numbers");
                    return None;
                }
                if name == "DevComm" {
                    if mutable {
                        self.cx.error_spanned_by(ty, "take the communicator by shared reference: `&DevComm<C>`");
                        return None;
                    }
                    return match pos {
                        Position::KernelParam => Some(("ncclDevComm".into(), Ty::DevComm)),
                        Position::DeviceFnParam => Some(("weft::DevComm const&".into(), Ty::DevComm)),
                        _ => {
                            self.cx.error_spanned_by(
                                ty,
                                "a `&DevComm` can only be a parameter: use the kernel's `dev` parameter directly",
                            );
                            None
                        }
                    };
                }
                if name == "Window" {
                    let (cpp, t) = self.map_path(inner, p, Position::Local)?;
                    return match pos {
                        Position::KernelParam => Some((cpp, t)),
                        Position::DeviceFnParam => Some((format!("{cpp} const&"), t)),
                        _ => {
                            self.cx.error_spanned_by(
                                ty,
                                "a `&Window<T>` can only be a parameter; bind `w.offset(n)` by value instead",
                            );
                            None
                        }
                    };
                }
            }
        }
        match pos {
            Position::DeviceFnParam => {
                let (cpp, t) = self.map(inner, Position::Local)?;
                if mutable {
                    Some((format!("{cpp}&"), Ty::Ref(Box::new(t))))
                } else if matches!(
                    t,
                    Ty::Scalar(_)
                        | Ty::Param(_)
                        | Ty::Tuple(_)
                        | Ty::Vocab(Vocab::TmaMatrix, _)
                        | Ty::Vocab(Vocab::TmaShards, _)
                ) {
                    // A `TmaMatrix` or `TmaShards` is the kernel's `__grid_constant__` parameter: lent as the const
                    // it is.
                    Some((format!("{cpp} const&"), t))
                } else {
                    // Vocabulary objects (barrier sessions, GIN sessions) mutate state in methods Rust declares on
                    // `&self`; weft.cuh declares those methods non-const, so bind a non-const reference.
                    Some((format!("{cpp}&"), t))
                }
            }
            Position::KernelParam => {
                self.cx.error_spanned_by(
                    ty,
                    "kernel parameters are `&DevComm<C>`, `&Window<T>`, `&[T]`, `&mut [T]`, `LlA2aHandle`, \
                     `TmaMatrix<T>`, `TmaShards<T>` or scalars: pass this by value or through a window",
                );
                None
            }
            Position::Local | Position::Return => {
                self.cx.error_spanned_by(
                    ty,
                    "references can only be parameters in kernels: bind the value itself (`let v = x[i];`)",
                );
                None
            }
        }
    }

    fn map_path(&self, ty: &Type, p: &syn::TypePath, pos: Position) -> Option<(String, Ty)> {
        if p.qself.is_some() {
            self.cx.error_spanned_by(ty, "qualified paths (`<T as Trait>::X`) are not supported in kernels");
            return None;
        }
        let segments: Vec<_> = p.path.segments.iter().collect();
        let last = segments.last()?;
        let name = last.ident.to_string();
        if let Some(advice) = host_type_advice(&name) {
            self.cx.error_spanned_by(ty, format!("`{name}` cannot be used in a kernel: {advice}"));
            return None;
        }
        if segments.len() == 1 && matches!(last.arguments, PathArguments::None) {
            if let Some(s) = Scalar::from_name(&name) {
                return Some((s.cpp().into(), Ty::Scalar(s)));
            }
            if let Some((_, s)) = self.generics.substitute.iter().find(|(n, _)| *n == name) {
                return Some((s.cpp().into(), Ty::Scalar(*s)));
            }
            if self.generics.coops.contains(&name) {
                return Some((super::lower::cpp_ident(&name), Ty::Vocab(Vocab::AnyCoop, None)));
            }
            if self.generics.elements.contains(&name) {
                return Some((super::lower::cpp_ident(&name), Ty::Param(name)));
            }
            if self.generics.capabilities.contains(&name) {
                self.cx.error_spanned_by(
                    ty,
                    format!("`{name}` is a capability set: it can only be the parameter of `DevComm<{name}>`"),
                );
                return None;
            }
        }
        if segments.len() > 1 && (name == "f16" || name == "bf16") {
            let s = Scalar::from_name(&name)?;
            return Some((s.cpp().into(), Ty::Scalar(s)));
        }
        if let Some(first) = segments.first() {
            if segments.len() > 1 && !is_vocabulary_path_prefix(&first.ident.to_string()) {
                // `std::vec::Vec`, `core::cell::Cell`, a user's host type: only vocabulary types exist in C++.
                self.cx.error_spanned_by(
                    ty,
                    "only scalars, element type parameters and weft vocabulary types can be used in kernels",
                );
                return None;
            }
        }
        // A vocabulary type: `weft::Name<args>`, lifetimes dropped (R5), `DevComm<C>` erased (R2).
        if name == "DevComm" {
            if pos == Position::KernelParam {
                self.cx.error_spanned_by(ty, "take the communicator by reference: `dev: &DevComm<C>`");
                return None;
            }
            return Some(("weft::DevComm".into(), Ty::DevComm));
        }
        let mut args = Vec::new();
        let mut arg_tys = Vec::new();
        if let PathArguments::AngleBracketed(a) = &last.arguments {
            for arg in &a.args {
                match arg {
                    GenericArgument::Lifetime(_) => {}
                    GenericArgument::Type(t) => {
                        if is_const_name(t) {
                            // `SharedArray<T, N>`: rustc parses a const argument named by an ident as a type.
                            self.cx.error_spanned_by(
                                t,
                                "write this size as an integer literal: the C++ side cannot see Rust constants",
                            );
                            return None;
                        }
                        let (c, t) = self.map(t, Position::Local)?;
                        args.push(c);
                        arg_tys.push(t);
                    }
                    GenericArgument::Const(e) => args.push(const_arg_text(e, self.cx)?),
                    _ => {
                        self.cx.error_spanned_by(arg, "this generic argument is not supported in kernels");
                        return None;
                    }
                }
            }
        }
        // `WindowView` is `weft::View` in C++.
        let cpp_name = if name == "WindowView" { "View" } else { name.as_str() };
        let cpp = if args.is_empty() {
            format!("weft::{cpp_name}")
        } else {
            format!("weft::{cpp_name}<{}>", args.join(", "))
        };
        let elem = arg_tys.into_iter().next().map(Box::new);
        let t = match (name.as_str(), elem) {
            ("Window", Some(e)) => Ty::Window(e),
            ("WindowView", Some(e)) => Ty::Indexable(Container::View, e),
            ("SharedArray", Some(e)) => Ty::Indexable(Container::Shared, e),
            (_, elem) => match Vocab::from_name(&name) {
                Some(
                    v @ (Vocab::Pack
                    | Vocab::WidePack
                    | Vocab::MultimemView
                    | Vocab::MmaA
                    | Vocab::MmaB
                    | Vocab::TmaMatrix
                    | Vocab::TmaShards),
                ) => Ty::Vocab(v, elem),
                Some(v) => Ty::Vocab(v, None),
                None => {
                    self.cx.error_spanned_by(
                        ty,
                        format!(
                            "`{name}` is not a type of weft's kernel vocabulary (docs/vocabulary.md §2 lists them): \
                             C++ has no `weft::{name}`; kernels use scalars, element type parameters and the \
                             vocabulary's types"
                        ),
                    );
                    return None;
                }
            },
        };
        Some((cpp, t))
    }
}

/// Tuples up to this many elements have a C++ struct in every generated source's prelude.
pub(crate) const MAX_TUPLE: usize = 8;

pub(crate) fn strip_group(ty: &Type) -> &Type {
    match ty {
        Type::Group(g) => strip_group(&g.elem),
        Type::Paren(p) => strip_group(&p.elem),
        other => other,
    }
}

/// The last identifier of a type path (`weft::device::Window<T>` → `Window`).
pub(crate) fn last_ident(ty: &Type) -> Option<String> {
    match strip_group(ty) {
        Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
        _ => None,
    }
}

fn is_const_name(ty: &Type) -> bool {
    match strip_group(ty) {
        Type::Path(p) if p.qself.is_none() && p.path.segments.len() == 1 => {
            let name = p.path.segments[0].ident.to_string();
            name.len() > 1 && name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        }
        _ => false,
    }
}

/// A const generic argument (`SharedArray<T, 256>`): only integer literals reach C++.
pub(crate) fn const_arg_text(expr: &syn::Expr, cx: &Ctxt) -> Option<String> {
    match expr {
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => Some(i.base10_digits().to_string()),
        syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            syn::Stmt::Expr(e, None) => const_arg_text(e, cx),
            _ => {
                cx.error_spanned_by(expr, "write this size as an integer literal");
                None
            }
        },
        _ => {
            cx.error_spanned_by(expr, "write this size as an integer literal: the C++ side cannot see Rust constants");
            None
        }
    }
}
