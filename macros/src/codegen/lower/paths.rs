//! Paths and fields: parameters and locals, vocabulary values (unit structs, enum variants, constants), and the
//! fields C++ spells (differently, for `LlA2aHandle`).

use super::code::Code;
use super::expr::{is_camel, is_screaming, Val};
use super::methods::describe;
use super::Lowerer;
use crate::codegen::types::{Scalar, Ty, Vocab};
use crate::codegen::usage::IndexValue;
use crate::codegen::valid;

/// Path prefixes that only say "the vocabulary": dropped before naming the C++ item.
fn is_vocabulary_module(segment: &str) -> bool {
    matches!(
        segment,
        "weft"
            | "weft_device"
            | "device"
            | "prelude"
            | "exec"
            | "numeric"
            | "atomic"
            | "barrier"
            | "caps"
            | "comm"
            | "coop"
            | "gin"
            | "ll_a2a"
            | "multimem"
            | "ordering"
            | "reduce_copy"
            | "shared"
            | "window"
            | "half"
    )
}

impl Lowerer<'_> {
    pub(crate) fn path_value(&mut self, p: &syn::ExprPath) -> Val {
        let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
        // Validation reported it (a host constant, a `std::` path).
        if p.qself.is_some() || segs.is_empty() || valid::path_problem(p).is_some() {
            return Val::error();
        }
        if segs.len() == 1 && p.path.leading_colon.is_none() {
            let name = segs[0].ident.to_string();
            if let Some(id) = self.lookup(&name) {
                let local = &self.locals[id];
                let ty = match &local.ty {
                    Ty::Ref(inner) => (**inner).clone(),
                    t => t.clone(),
                };
                return Val { code: Code::text(local.cpp.clone()), ty, index: local.index, atom: true };
            }
            if is_screaming(&name) {
                // `valid` rejected non-vocabulary constants.
                let ty = if name == "WARP_SIZE" { Ty::Scalar(Scalar::U32) } else { Ty::Unknown };
                return Val::new(Code::text(format!("weft::{name}")), ty);
            }
            if is_camel(&name) {
                return self.unit_struct(p, &name);
            }
            self.cx.error_spanned_by(
                p,
                format!(
                    "`{name}` is not a parameter or local of this function: a kernel can only read its parameters \
                     and locals (pass host values as parameters)"
                ),
            );
            return Val::error();
        }
        let names: Vec<String> = segs.iter().map(|s| s.ident.to_string()).collect();
        let last = names.last().cloned().unwrap_or_default();
        let prev = names.get(names.len().wrapping_sub(2)).cloned().unwrap_or_default();
        if let (Some(s), true) = (Scalar::from_name(&prev), names.len() == 2) {
            if let Some((text, atom)) = integer_constant(s, &last).or_else(|| float_constant(s, &last)) {
                return Val { code: Code::text(text), ty: Ty::Scalar(s), index: IndexValue::Unknown, atom };
            }
        }
        if is_screaming(&last) {
            // Vocabulary constants; `valid` rejected the others.
            let ty = if last == "WARP_SIZE" { Ty::Scalar(Scalar::U32) } else { Ty::Unknown };
            return Val::new(Code::text(format!("weft::{last}")), ty);
        }
        if is_camel(&prev) && is_camel(&last) {
            // R8: enum variants.
            return match Vocab::from_name(&prev) {
                Some(v) if v.variants().contains(&last.as_str()) => {
                    Val::new(Code::text(format!("weft::{prev}::{last}")), Ty::Vocab(v, None))
                }
                _ => {
                    self.cx.error_spanned_by(
                        p,
                        format!(
                            "`{prev}::{last}` is not a value of weft's kernel vocabulary (its enums are `Order`, \
                             `Scope` and `BarrierResult`): C++ has no `weft::{prev}::{last}`"
                        ),
                    );
                    Val::error()
                }
            };
        }
        if is_camel(&last) && names[..names.len() - 1].iter().all(|s| is_vocabulary_module(s)) {
            return self.unit_struct(p, &last);
        }
        self.cx.error_spanned_by(
            p,
            "only parameters, locals and vocabulary values (`Order::Release`, `Cta`, `WARP_SIZE`) can be named in a \
             kernel",
        );
        Val::error()
    }

    /// R6: a unit struct is a value in Rust, a type in C++ (`Cta` → `weft::Cta{}`).
    fn unit_struct(&mut self, p: &syn::ExprPath, name: &str) -> Val {
        match Vocab::from_name(name) {
            Some(v) if v.is_unit_struct() => Val::new(Code::text(format!("weft::{name}{{}}")), Ty::Vocab(v, None)),
            _ => {
                self.cx.error_spanned_by(
                    p,
                    format!(
                        "`{name}` is not a value of weft's kernel vocabulary (its unit values are `Thread`, `Warp`, \
                         `Cta` and `NoAction`): C++ has no `weft::{name}`"
                    ),
                );
                Val::error()
            }
        }
    }

    /// Fields: tuples' `.0` (`._0` in C++) and `Team`'s `nranks`/`rank`/`stride`. The names are unique among the
    /// vocabulary's types, so a value of unknown type (a device fn's result) is resolved by the name.
    pub(crate) fn field(&mut self, f: &syn::ExprField) -> Val {
        let base = self.expr(&f.base);
        let untyped = matches!(base.ty, Ty::Unknown | Ty::Local(_));
        let (name, ty) = match (&f.member, &base.ty) {
            (_, Ty::Error) => (String::from("error"), Ty::Error),
            (syn::Member::Unnamed(i), Ty::Tuple(elems)) => {
                let n = i.index as usize;
                (format!("_{n}"), elems.get(n).cloned().unwrap_or(Ty::Unknown))
            }
            (syn::Member::Unnamed(i), _) if untyped => (format!("_{}", i.index), Ty::Unknown),
            (syn::Member::Named(name), ty) => {
                let field = name.to_string();
                match (field.as_str(), ty) {
                    ("nranks" | "rank" | "stride", Ty::Vocab(Vocab::Team, _)) => (field, Ty::Scalar(Scalar::U32)),
                    ("nranks" | "rank" | "stride", _) if untyped => (field, Ty::Scalar(Scalar::U32)),
                    _ => return self.not_a_field(f, &field, ty),
                }
            }
            (syn::Member::Unnamed(i), ty) => return self.not_a_field(f, &i.index.to_string(), ty),
        };
        let mut code = base.operand();
        code.push_str(&format!(".{name}"));
        Val::new(code, ty)
    }

    fn not_a_field(&mut self, f: &syn::ExprField, field: &str, ty: &Ty) -> Val {
        self.cx.error_spanned_by(
            &f.member,
            format!(
                "`{field}` is not a field of {} in weft's kernel vocabulary (fields: a tuple's `.0`, `.1`, …, \
                 `Team`'s `nranks`, `rank`, `stride`): C++ has no such member",
                describe(ty)
            ),
        );
        Val::error()
    }
}

/// `f32::INFINITY` → `__int_as_float(0x7f800000)`, `f64::MAX` → `0x1.fffffffffffffp+1023` (hex literals are
/// exact; C++17); whether the spelling is an atom.
fn float_constant(s: Scalar, name: &str) -> Option<(String, bool)> {
    let text = match (s, name) {
        (Scalar::F32, "INFINITY") => "__int_as_float(0x7f800000)",
        (Scalar::F32, "NEG_INFINITY") => "(-__int_as_float(0x7f800000))",
        (Scalar::F32, "NAN") => "__int_as_float(0x7fc00000)",
        (Scalar::F32, "MAX") => "0x1.fffffep+127f",
        (Scalar::F32, "MIN") => "(-0x1.fffffep+127f)",
        (Scalar::F32, "EPSILON") => "0x1p-23f",
        (Scalar::F32, "MIN_POSITIVE") => "0x1p-126f",
        (Scalar::F64, "INFINITY") => "__longlong_as_double(0x7ff0000000000000ll)",
        (Scalar::F64, "NEG_INFINITY") => "(-__longlong_as_double(0x7ff0000000000000ll))",
        (Scalar::F64, "NAN") => "__longlong_as_double(0x7ff8000000000000ll)",
        (Scalar::F64, "MAX") => "0x1.fffffffffffffp+1023",
        (Scalar::F64, "MIN") => "(-0x1.fffffffffffffp+1023)",
        (Scalar::F64, "EPSILON") => "0x1p-52",
        (Scalar::F64, "MIN_POSITIVE") => "0x1p-1022",
        _ => return None,
    };
    Some((text.to_string(), true))
}

/// `u32::MAX` → `4294967295u`; `i64::MIN` → `(-9223372036854775807ll - 1)`; `u8::BITS` → `8u`.
fn integer_constant(s: Scalar, name: &str) -> Option<(String, bool)> {
    let bits: u32 = match s {
        Scalar::I8 | Scalar::U8 => 8,
        Scalar::I16 | Scalar::U16 => 16,
        Scalar::I32 | Scalar::U32 => 32,
        Scalar::I64 | Scalar::U64 | Scalar::Isize | Scalar::Usize => 64,
        _ => return None,
    };
    let signed = matches!(s, Scalar::I8 | Scalar::I16 | Scalar::I32 | Scalar::I64 | Scalar::Isize);
    match name {
        "BITS" => Some((Scalar::U32.int_literal(&bits.to_string()), true)),
        "MAX" if signed => Some((s.int_literal(&((1u128 << (bits - 1)) - 1).to_string()), true)),
        "MAX" => Some((s.int_literal(&((1u128 << bits) - 1).to_string()), true)),
        "MIN" if signed => {
            let max = s.int_literal(&((1u128 << (bits - 1)) - 1).to_string());
            Some((format!("(-{max} - {})", s.int_literal("1")), true))
        }
        "MIN" => Some((s.int_literal("0"), true)),
        _ => None,
    }
}
