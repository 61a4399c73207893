//! Fuzzing the macro front end (issue 12, item 10): mutated kernels and random token streams go through the whole
//! expansion as library code (attribute parsing, validation, lowering, the emitters). For every input:
//!
//! - nothing panics;
//! - every error has a message, and a location when the input had one (not the call site);
//! - the expansion of a function is Rust that parses (the errors, the user's function, the module);
//! - an input the expansion accepts is accepted by the C++ emitter too, and its C++ has no placeholder left by a
//!   construct the validator missed (`/* error */`), balanced brackets, and no `auto` declaration without a value.
//!
//! `fuzz_the_front_end_briefly` runs in CI (fixed seed, a bounded number of inputs); `fuzz_long` is the long run
//! recorded in docs/macro.md (`WEFT_FUZZ_SECONDS`, `WEFT_FUZZ_SEED`; run it with `--release`).

mod mutate;
mod regressions;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::visit::Visit;

use super::corpus::{self, Case};
use crate::codegen::ast::FnKind;
use mutate::{Input, Pools, Rng};

/// How one input fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// It does not lex (unbalanced delimiters): rustc would not have called the macro.
    Unlexable,
    Accepted,
    Rejected,
}

/// A broken invariant, with what reproduces it.
#[derive(Debug, Clone)]
struct Failure {
    seed: u64,
    iteration: usize,
    problem: String,
    /// The input, made as small as the problem allows.
    input: Input,
    /// The input as generated.
    original: Input,
}

#[derive(Debug, Default)]
struct Report {
    inputs: usize,
    unlexable: usize,
    accepted: usize,
    rejected: usize,
    failures: Vec<Failure>,
}

impl Report {
    fn add(&mut self, other: Report) {
        self.inputs += other.inputs;
        self.unlexable += other.unlexable;
        self.accepted += other.accepted;
        self.rejected += other.rejected;
        self.failures.extend(other.failures);
    }
}

thread_local! {
    /// Set while this thread runs fuzz inputs: their panics are findings, reported with the input, not printed.
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn install_quiet_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(|q| q.get()) {
                previous(info);
            }
        }));
    });
}

/// The seeds: every kernel and device fn of the repository (examples, GPU tests, UI cases, the unit tests' and the
/// nvcc and expansion tests' kernels), as text.
fn seeds() -> Vec<Input> {
    let mut cases: Vec<Case> = corpus::accepted_sources();
    for file in corpus::rust_files("tests/ui") {
        cases.extend(corpus::cases_in_file(&file));
    }
    let mut inputs: Vec<Input> = cases
        .iter()
        .map(|c| Input { kind: c.kind, attr: c.attr.to_string(), item: c.item.to_token_stream().to_string() })
        .collect();
    // Functions written in `quote! { … }` by the unit tests and the nvcc test, and the expansion test's crates.
    let mut files = corpus::rust_files("macros/src/codegen/tests");
    files.push(corpus::workspace().join("macros/tests/nvcc.rs"));
    files.push(corpus::workspace().join("macros/tests/expand.rs"));
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a test file");
        let parsed = syn::parse_file(&text).expect("a test file parses");
        let mut found = Snippets::default();
        found.visit_file(&parsed);
        inputs.extend(found.0);
    }
    assert!(inputs.len() > 100, "only {} seeds: is the corpus scan broken?", inputs.len());
    inputs
}

#[derive(Default)]
struct Snippets(Vec<Input>);

impl<'ast> Visit<'ast> for Snippets {
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        if m.path.segments.last().is_some_and(|s| s.ident == "quote") {
            if let Ok(item) = syn::parse2::<syn::ItemFn>(m.tokens.clone()) {
                let kind = if item.sig.output == syn::ReturnType::Default { FnKind::Kernel } else { FnKind::DeviceFn };
                self.0.push(Input { kind, attr: String::new(), item: item.to_token_stream().to_string() });
            }
        }
    }
    fn visit_item_const(&mut self, c: &'ast syn::ItemConst) {
        // The expansion test's scratch crates are Rust source in string constants.
        if let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) = &*c.expr {
            if syn::parse_file(&s.value()).is_ok() {
                let cases = corpus::cases_in_source(&s.value(), Path::new(&c.ident.to_string()));
                self.0.extend(cases.iter().map(|c| Input {
                    kind: c.kind,
                    attr: c.attr.to_string(),
                    item: c.item.to_token_stream().to_string(),
                }));
            }
        }
    }
}

/// Runs one input through the expansion and checks the invariants.
fn check(input: &Input) -> Result<Outcome, String> {
    let (Ok(attr), Ok(item)) = (TokenStream::from_str(&input.attr), TokenStream::from_str(&input.item)) else {
        return Ok(Outcome::Unlexable);
    };
    let located = !attr.is_empty() || !item.is_empty();
    QUIET.with(|q| q.set(true));
    let result = catch_unwind(AssertUnwindSafe(|| inspect(input.kind, attr, item, located)));
    QUIET.with(|q| q.set(false));
    match result {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(no message)".into());
            Err(format!("panicked: {message}"))
        }
    }
}

fn inspect(kind: FnKind, attr: TokenStream, item: TokenStream, located: bool) -> Result<Outcome, String> {
    let parsed: Option<syn::ItemFn> = syn::parse2(item.clone()).ok();
    let expansion = crate::codegen::expand(kind, attr.clone(), item);
    for e in &expansion.errors {
        let message = e.to_string();
        if message.trim().is_empty() {
            return Err("an error without a message".into());
        }
        if located && e.span().byte_range() == (0..0) {
            return Err(format!("an error at no location (the call site): {message}"));
        }
    }
    let Some(f) = parsed else {
        return if expansion.errors.is_empty() {
            Err("not a function, yet no error".into())
        } else {
            Ok(Outcome::Rejected)
        };
    };
    syn::parse2::<syn::File>(expansion.tokens.clone()).map_err(|e| format!("the expansion is not Rust: {e}"))?;
    if !expansion.errors.is_empty() {
        return Ok(Outcome::Rejected);
    }
    let options = super::OPTIONS;
    let source = match kind {
        FnKind::Kernel => crate::codegen::generate_cuda_with(attr, &f, &[], options),
        FnKind::DeviceFn => crate::codegen::generate_device_fn_cuda(attr, &f, options),
    }
    .map_err(|e| format!("the expansion has no errors but the emitter has: {e:?}"))?;
    check_cpp(&source)?;
    Ok(Outcome::Accepted)
}

/// What accepted C++ must look like.
fn check_cpp(source: &str) -> Result<(), String> {
    for placeholder in ["/* error */", "/* ? */"] {
        if source.contains(placeholder) {
            return Err(format!("accepted, but the C++ has the placeholder `{placeholder}`:\n{source}"));
        }
    }
    let mut stack = Vec::new();
    for line in source.lines() {
        let code = line.split("//").next().unwrap_or("");
        if let Some(at) = code.find("__global__ void ") {
            // The entry point's name: a C++ identifier in the users' namespace (`rs_…`: `float`, `r#match` are Rust
            // names).
            let rest = code[at + "__global__ void ".len()..].trim_start();
            let rest = match rest.strip_prefix("__launch_bounds__(") {
                Some(r) => r.split_once(") ").map(|(_, r)| r).unwrap_or(r),
                None => rest,
            };
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && name.starts_with("rs_");
            if !valid || !rest[name.len()..].starts_with('(') {
                return Err(format!("accepted, but an entry point is not a C++ name: `{rest}`"));
            }
        }
        if let Some(at) = code.find("auto ") {
            let rest = &code[at + 5..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && rest[name.len()..].trim_start().starts_with(';') {
                return Err(format!("accepted, but the C++ declares `auto {name};` without a value:\n{source}"));
            }
            // Every name the body declares is a user's (`rs_…`) or the translation's (`w_…`): never one C++ or a
            // header could mean otherwise.
            if !name.is_empty() && !name.starts_with("rs_") && !name.starts_with("w_") {
                return Err(format!("accepted, but the C++ declares `{name}`, which is not mangled:\n{source}"));
            }
        }
        for c in code.chars() {
            match c {
                '(' | '[' | '{' => stack.push(c),
                ')' | ']' | '}' => {
                    let open = stack.pop();
                    let expected = match c {
                        ')' => '(',
                        ']' => '[',
                        _ => '{',
                    };
                    if open != Some(expected) {
                        return Err(format!("accepted, but the C++ has unbalanced brackets near `{line}`:\n{source}"));
                    }
                }
                _ => {}
            }
        }
    }
    if !stack.is_empty() {
        return Err(format!("accepted, but the C++ leaves {stack:?} open:\n{source}"));
    }
    Ok(())
}

/// Runs `inputs` generated from `seed` (or until `deadline`).
fn fuzz(pools: &Pools, seed: u64, inputs: usize, deadline: Instant) -> Report {
    install_quiet_panic_hook();
    let mut rng = Rng::new(seed);
    let mut report = Report::default();
    for iteration in 0..inputs {
        if Instant::now() >= deadline {
            break;
        }
        let input = pools.generate(&mut rng);
        report.inputs += 1;
        match check(&input) {
            Ok(Outcome::Unlexable) => report.unlexable += 1,
            Ok(Outcome::Accepted) => report.accepted += 1,
            Ok(Outcome::Rejected) => report.rejected += 1,
            Err(problem) => {
                let original = input.clone();
                let input = minimize(input, &problem);
                report.failures.push(Failure { seed, iteration, problem, input, original });
            }
        }
        // Fallback spans keep their source text in a thread-local map; each input is lexed afresh from text.
        proc_macro2::extra::invalidate_current_thread_spans();
    }
    report
}

/// The kind of a problem (its first line, with locations and values that vary cut off), to group findings.
fn problem_class(problem: &str) -> String {
    problem.lines().next().unwrap_or("").split(['`', ':']).take(2).collect::<Vec<_>>().join(":")
}

/// Deletes token trees from the item while the same kind of problem remains, so the report shows a small input.
fn minimize(mut input: Input, problem: &str) -> Input {
    let class = problem_class(problem);
    let mut budget = 400;
    let mut progress = true;
    while progress && budget > 0 {
        progress = false;
        let Ok(tokens) = TokenStream::from_str(&input.item) else { break };
        let trees: Vec<_> = tokens.into_iter().collect();
        let total = mutate::count(&trees);
        for target in (0..total).rev() {
            budget -= 1;
            if budget == 0 {
                break;
            }
            let mut counter = 0;
            let mut rng = Rng::new(0);
            let smaller = mutate::edit(
                trees.clone(),
                target,
                &mut counter,
                &mut |_, _| mutate::Edit::Replace(Vec::new()),
                &mut rng,
            );
            let candidate = Input { item: smaller.into_iter().collect::<TokenStream>().to_string(), ..input.clone() };
            let same = matches!(check(&candidate), Err(p) if problem_class(&p) == class);
            proc_macro2::extra::invalidate_current_thread_spans();
            if same {
                input = candidate;
                progress = true;
                break;
            }
        }
    }
    input
}

fn describe(failures: &[Failure]) -> String {
    let mut classes: Vec<(String, &Failure, usize)> = Vec::new();
    for f in failures {
        let class = problem_class(&f.problem);
        match classes.iter_mut().find(|(c, _, _)| *c == class) {
            Some((_, _, n)) => *n += 1,
            None => classes.push((class, f, 1)),
        }
    }
    classes
        .iter()
        .map(|(_, f, n)| {
            format!(
                "{n} × {}\n  seed {} input {}: #[{}({})]\n  {}\n  (as generated: {})",
                f.problem.lines().next().unwrap_or(""),
                f.seed,
                f.iteration,
                match f.input.kind {
                    FnKind::Kernel => "kernel",
                    FnKind::DeviceFn => "device_fn",
                },
                f.input.attr,
                f.input.item,
                f.original.item
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The CI run: a fixed seed and a bounded number of inputs (a few seconds in a debug build on two cores).
#[test]
fn fuzz_the_front_end_briefly() {
    let pools = Pools::new(seeds());
    let started = Instant::now();
    let report = fuzz(&pools, 0x5eed_0012, 600, started + Duration::from_secs(20));
    println!(
        "fuzz: {} inputs in {:.1} s: {} accepted, {} rejected, {} unlexable, {} failures",
        report.inputs,
        started.elapsed().as_secs_f64(),
        report.accepted,
        report.rejected,
        report.unlexable,
        report.failures.len()
    );
    assert!(report.failures.is_empty(), "the fuzzer found:\n{}", describe(&report.failures));
    assert!(report.inputs >= 200, "only {} inputs ran", report.inputs);
    assert!(report.accepted > 10 && report.rejected > 100, "inputs are not varied enough: {report:?}");
}

/// The long run: `WEFT_FUZZ_SECONDS` (default 300) over seeds from `WEFT_FUZZ_SEED` (default 1), 20 000 inputs per
/// seed, one thread per core. `cargo test -p weft-macros --release --lib fuzz_long -- --ignored --nocapture`.
#[test]
#[ignore = "minutes: the long fuzzing run, by hand (docs/macro.md records its results)"]
fn fuzz_long() {
    let seconds: u64 = std::env::var("WEFT_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let first: u64 = std::env::var("WEFT_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let seeds = seeds();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let reports: Vec<(Vec<u64>, Report)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|t| {
                let seeds = seeds.clone();
                scope.spawn(move || {
                    let pools = Pools::new(seeds);
                    let mut total = Report::default();
                    let mut ran = Vec::new();
                    let mut seed = first + t;
                    while Instant::now() < deadline {
                        total.add(fuzz(&pools, seed, 20_000, deadline));
                        ran.push(seed);
                        seed += threads as u64;
                    }
                    (ran, total)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("fuzz thread")).collect()
    });
    let mut all_seeds: Vec<u64> = reports.iter().flat_map(|(s, _)| s.clone()).collect();
    all_seeds.sort_unstable();
    let mut total = Report::default();
    for (_, r) in reports {
        total.add(r);
    }
    println!(
        "fuzz_long: {} inputs in {:.0} s on {threads} threads, seeds {:?}: {} accepted, {} rejected, {} unlexable, {} \
         failures",
        total.inputs,
        started.elapsed().as_secs_f64(),
        all_seeds,
        total.accepted,
        total.rejected,
        total.unlexable,
        total.failures.len()
    );
    assert!(total.failures.is_empty(), "the fuzzer found:\n{}", describe(&total.failures));
}
