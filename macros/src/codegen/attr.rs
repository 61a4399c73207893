//! The arguments of `#[kernel(…)]` and `#[device_fn(…)]`.
//!
//! ```text
//! #[kernel(types(f32, bf16))]                    one element type parameter
//! #[kernel(types(T = [f32, bf16], I = [i32]))]   several
//! #[kernel(debug)]                               print the generated C++ while compiling
//! #[kernel(lsa_barriers = 4)]                    a resource count the body's indices do not show
//! #[kernel(lsa_barriers = grid)]                 … one per block of the launch grid (x)
//! #[kernel(len(x == out, out >= n * lsa_size))]  launch-time checks of slice/window lengths (arithmetic over
//!                                                parameters, team sizes and ranks, and literals)
//! #[kernel(launch_bounds(512, 3))]               `__launch_bounds__`: at most 512 threads per block, and
//!                                                registers for at least 3 blocks per SM
//! #[kernel(no_device_checks)]                    every access must be proven in bounds: one `launch` would check
//!                                                on the device is an error
//! ```

use proc_macro2::{Span, TokenStream};
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::{Ident, Token};

use super::ctxt::Ctxt;
use super::types::Scalar;
use super::usage::Resource;

/// Instantiation list of one element type parameter (`T = [f32, bf16]`), or of the only one (`types(f32)`).
#[derive(Debug, Clone)]
pub(crate) struct TypeList {
    pub(crate) param: Option<Ident>,
    pub(crate) types: Vec<(Scalar, Span)>,
    pub(crate) span: Span,
}

/// A declared resource count: `lsa_barriers = 4` or `= grid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Declared {
    Count(u32),
    Grid,
}

/// `len(a == b)`: compared at launch; each side is arithmetic (`+ - * / %`, parentheses) over parameters (a slice's
/// or window's length, an integer's value), the device communicator's team sizes and ranks (`lsa_size`, `lsa_rank`,
/// `nranks`, `rank`) and integer literals.
#[derive(Debug, Clone)]
pub(crate) struct LenCheck {
    pub(crate) lhs: LenExpr,
    pub(crate) op: syn::BinOp,
    pub(crate) rhs: LenExpr,
    pub(crate) tokens: TokenStream,
}

/// One side of a `len(…)` rule.
#[derive(Debug, Clone)]
pub(crate) enum LenExpr {
    /// A parameter, or (if no parameter has the name) a team value: `lsa_size`, `lsa_rank`, `nranks`, `rank`.
    Name(Ident),
    Literal(u64),
    Binary(Box<LenExpr>, LenOp, Box<LenExpr>),
}

/// The arithmetic of `len(…)` rules, computed on the host without wrapping (a rule whose arithmetic overflows,
/// underflows or divides by zero fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LenOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
}

/// The team values `len(…)` rules may name, with what the host reads for them.
pub(crate) const TEAM_VALUES: &[&str] = &["lsa_size", "lsa_rank", "nranks", "rank"];

impl LenExpr {
    /// Every name it mentions.
    pub(crate) fn names(&self) -> Vec<&Ident> {
        match self {
            LenExpr::Name(i) => vec![i],
            LenExpr::Literal(_) => Vec::new(),
            LenExpr::Binary(a, _, b) => {
                let mut out = a.names();
                out.extend(b.names());
                out
            }
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct Attributes {
    pub(crate) debug: bool,
    /// `no_device_checks`: an access the bounds analysis cannot prove is an error, not a device check.
    pub(crate) no_device_checks: bool,
    pub(crate) types: Vec<TypeList>,
    pub(crate) declared: Vec<(Resource, Declared, Span)>,
    pub(crate) len_checks: Vec<LenCheck>,
    pub(crate) launch_bounds: Option<LaunchBounds>,
}

/// `launch_bounds(max_threads)` or `launch_bounds(max_threads, min_blocks)`: CUDA's `__launch_bounds__` on every
/// entry point. nvcc then keeps the registers per thread low enough for `min_blocks` blocks of `max_threads`
/// threads per SM (spilling if it must), and the kernel cannot be launched with more than `max_threads` threads
/// per block (the launcher says so before CUDA does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaunchBounds {
    pub(crate) max_threads: u32,
    pub(crate) min_blocks: Option<u32>,
}

impl Attributes {
    pub(crate) fn declared(&self, resource: Resource) -> Option<Declared> {
        self.declared.iter().find(|(r, _, _)| *r == resource).map(|(_, d, _)| *d)
    }
}

/// Which macro the arguments belong to: `device_fn` takes neither `types` nor `len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AttrKind {
    Kernel,
    DeviceFn,
}

pub(crate) fn parse(kind: AttrKind, tokens: TokenStream, cx: &Ctxt) -> Attributes {
    let mut attrs = Attributes::default();
    // Each comma-separated argument is parsed on its own, so every bad argument is reported, not just the first.
    for argument in split_arguments(tokens) {
        parse_argument(kind, argument, &mut attrs, cx);
    }
    attrs
}

/// The comma-separated arguments, each with a trailing `,` spanned at its last token: syn reports "expected …" at
/// the end of what it parses on the next token, and without one that would be no place in the source (the call
/// site). `types` then says "expected parentheses" at `types`.
fn split_arguments(tokens: TokenStream) -> Vec<TokenStream> {
    let mut out = Vec::new();
    let mut current = TokenStream::new();
    let mut last = None;
    let finish = |current: TokenStream, span: Option<Span>| {
        let mut comma = proc_macro2::Punct::new(',', proc_macro2::Spacing::Alone);
        comma.set_span(span.unwrap_or_else(Span::call_site));
        let mut argument = current;
        argument.extend([proc_macro2::TokenTree::Punct(comma)]);
        argument
    };
    for tt in tokens {
        match &tt {
            proc_macro2::TokenTree::Punct(p) if p.as_char() == ',' => {
                // An empty argument (`a,,b`) is reported at its comma.
                let span = last.take().or(Some(p.span()));
                out.push(finish(std::mem::take(&mut current), span));
            }
            _ => {
                last = Some(tt.span());
                current.extend([tt]);
            }
        }
    }
    if !current.is_empty() {
        out.push(finish(current, last));
    }
    out
}

fn parse_argument(kind: AttrKind, tokens: TokenStream, attrs: &mut Attributes, cx: &Ctxt) {
    let parser = syn::meta::parser(|meta| {
        let Some(ident) = meta.path.get_ident() else {
            return Err(meta.error("expected an identifier such as `debug` or `types(f32, bf16)`"));
        };
        let name = ident.to_string();
        match name.as_str() {
            "debug" => {
                attrs.debug = true;
                Ok(())
            }
            "no_device_checks" if kind == AttrKind::Kernel => {
                attrs.no_device_checks = true;
                Ok(())
            }
            "types" if kind == AttrKind::Kernel => {
                let content;
                syn::parenthesized!(content in meta.input);
                parse_types(&content, &mut attrs.types, ident.span())
            }
            "launch_bounds" if kind == AttrKind::Kernel => {
                let content;
                syn::parenthesized!(content in meta.input);
                let values = Punctuated::<syn::LitInt, Token![,]>::parse_terminated(&content)?;
                attrs.launch_bounds = Some(parse_launch_bounds(ident, &values)?);
                Ok(())
            }
            "len" if kind == AttrKind::Kernel => {
                let content;
                syn::parenthesized!(content in meta.input);
                let checks = Punctuated::<syn::Expr, Token![,]>::parse_terminated(&content)?;
                for check in checks {
                    attrs.len_checks.push(parse_len_check(&check)?);
                }
                Ok(())
            }
            other => match Resource::from_attribute(other) {
                Some(resource) => {
                    let value: syn::Expr = meta.value()?.parse()?;
                    let declared = match &value {
                        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => {
                            Declared::Count(i.base10_parse::<u32>()?)
                        }
                        syn::Expr::Path(p) if p.path.is_ident("grid") => Declared::Grid,
                        _ => {
                            return Err(syn::Error::new_spanned(
                                &value,
                                format!("expected a count or `grid`: `{other} = 4` or `{other} = grid`"),
                            ))
                        }
                    };
                    attrs.declared.push((resource, declared, ident.span()));
                    Ok(())
                }
                None => {
                    let known = match kind {
                        AttrKind::Kernel => "`types(…)`, `debug`, `len(…)`, `launch_bounds(…)`, `no_device_checks`",
                        AttrKind::DeviceFn => "`debug`",
                    };
                    Err(meta.error(format!(
                        "unknown argument `{other}`: expected {known} or a resource count ({})",
                        Resource::ALL.iter().map(|r| format!("`{} = N`", r.attribute())).collect::<Vec<_>>().join(", ")
                    )))
                }
            },
        }
    });
    if let Err(e) = parser.parse2(tokens) {
        cx.syn_error(e);
    }
}

fn parse_launch_bounds(ident: &Ident, values: &Punctuated<syn::LitInt, Token![,]>) -> syn::Result<LaunchBounds> {
    const HOW: &str = "write `launch_bounds(max_threads)` or `launch_bounds(max_threads, min_blocks_per_sm)`, e.g. \
                       `launch_bounds(512, 3)`";
    let numbers: Vec<u32> = values.iter().map(|v| v.base10_parse::<u32>()).collect::<syn::Result<_>>()?;
    match numbers[..] {
        [max_threads, ..] if max_threads == 0 || max_threads > 1024 => {
            Err(syn::Error::new_spanned(&values[0], format!("{max_threads} threads per block: CUDA allows 1 to 1024")))
        }
        [_, 0] => Err(syn::Error::new_spanned(&values[1], "at least 1 block per SM")),
        [max_threads] => Ok(LaunchBounds { max_threads, min_blocks: None }),
        [max_threads, min_blocks] => Ok(LaunchBounds { max_threads, min_blocks: Some(min_blocks) }),
        _ => Err(syn::Error::new(ident.span(), HOW)),
    }
}

fn parse_types(input: ParseStream<'_>, out: &mut Vec<TypeList>, span: Span) -> syn::Result<()> {
    if input.peek(Ident) && input.peek2(Token![=]) {
        let entries = Punctuated::<NamedList, Token![,]>::parse_terminated(input)?;
        for entry in entries {
            out.push(TypeList { param: Some(entry.param), types: entry.types, span: entry.span });
        }
    } else {
        let types = Punctuated::<Ident, Token![,]>::parse_terminated(input)?;
        let mut list = Vec::new();
        for t in types {
            list.push((scalar(&t)?, t.span()));
        }
        if list.is_empty() {
            return Err(syn::Error::new(span, "list at least one type: `types(f32, bf16)`"));
        }
        out.push(TypeList { param: None, types: list, span });
    }
    Ok(())
}

struct NamedList {
    param: Ident,
    types: Vec<(Scalar, Span)>,
    span: Span,
}

impl Parse for NamedList {
    fn parse(input: ParseStream<'_>) -> syn::Result<NamedList> {
        let param: Ident = input.parse()?;
        input.parse::<Token![=]>()?;
        let content;
        syn::bracketed!(content in input);
        let types = Punctuated::<Ident, Token![,]>::parse_terminated(&content)?;
        let mut list = Vec::new();
        for t in types {
            list.push((scalar(&t)?, t.span()));
        }
        if list.is_empty() {
            return Err(syn::Error::new(param.span(), format!("list at least one type: `{param} = [f32]`")));
        }
        Ok(NamedList { span: param.span(), param, types: list })
    }
}

fn scalar(ident: &Ident) -> syn::Result<Scalar> {
    Scalar::from_name(&ident.to_string()).filter(|s| *s != Scalar::I16 && *s != Scalar::U16).ok_or_else(|| {
        syn::Error::new(
            ident.span(),
            format!(
                "`{ident}` is not an element type: use f32, f64, f16, bf16, i8, u8, i32, u32, i64, u64, usize, \
                 isize or bool"
            ),
        )
    })
}

fn parse_len_check(expr: &syn::Expr) -> syn::Result<LenCheck> {
    use quote::ToTokens;
    let syn::Expr::Binary(b) = expr else {
        return Err(syn::Error::new_spanned(expr, "expected a comparison such as `x == out` or `out >= n * lsa_size`"));
    };
    if !matches!(
        b.op,
        syn::BinOp::Eq(_)
            | syn::BinOp::Ne(_)
            | syn::BinOp::Lt(_)
            | syn::BinOp::Le(_)
            | syn::BinOp::Gt(_)
            | syn::BinOp::Ge(_)
    ) {
        return Err(syn::Error::new_spanned(b.op, "expected one of `==`, `!=`, `<`, `<=`, `>`, `>=`"));
    }
    Ok(LenCheck { lhs: len_expr(&b.left)?, op: b.op, rhs: len_expr(&b.right)?, tokens: expr.to_token_stream() })
}

fn len_expr(e: &syn::Expr) -> syn::Result<LenExpr> {
    const HOW: &str = "expected a parameter, a team value (`lsa_size`, `lsa_rank`, `nranks`, `rank`), an integer \
                       literal, or arithmetic of them with `+ - * / %` (`out >= n * lsa_size`)";
    match e {
        syn::Expr::Path(p) => match p.path.get_ident() {
            Some(ident) if p.qself.is_none() => Ok(LenExpr::Name(ident.clone())),
            _ => Err(syn::Error::new_spanned(e, HOW)),
        },
        syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Int(i), .. }) => Ok(LenExpr::Literal(i.base10_parse()?)),
        syn::Expr::Paren(p) => len_expr(&p.expr),
        syn::Expr::Group(g) => len_expr(&g.expr),
        syn::Expr::Binary(b) => {
            let op = match b.op {
                syn::BinOp::Add(_) => LenOp::Add,
                syn::BinOp::Sub(_) => LenOp::Sub,
                syn::BinOp::Mul(_) => LenOp::Mul,
                syn::BinOp::Div(_) => LenOp::Div,
                syn::BinOp::Rem(_) => LenOp::Rem,
                _ => return Err(syn::Error::new_spanned(b.op, HOW)),
            };
            Ok(LenExpr::Binary(Box::new(len_expr(&b.left)?), op, Box::new(len_expr(&b.right)?)))
        }
        _ => Err(syn::Error::new_spanned(e, HOW)),
    }
}
