//! `cargo xtask test|bench|doctor|provision`: provisions weft's pinned CUDA/NCCL toolchain and
//! runs the suites against it. See docs/toolchain.md for what lands where and why.

mod doctor;
mod layers;
mod probe;
mod provision;
mod toolchain;

use std::ffi::OsString;
use std::process::{Command, ExitCode};

use anyhow::{bail, Context, Result};

use weft_host::discovery::Environment;

use crate::provision::ensure_toolchain;
use crate::toolchain::{nvcc_version, toolchain_dir, workspace_root, Toolchain};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test [-- <cargo test args>]    provision the toolchain if needed, then
                                 `cargo test --workspace --no-fail-fast`
  bench [-- <cargo bench args>]  provision the toolchain if needed, then
                                 `cargo bench -p weft --bench fused --bench dsl`
                                 (a package or target chosen after `--` replaces those)
  doctor                         report what a GPU run of a weft program finds on this
                                 machine (libnccl, NCCL headers, nvcc, kernel cache, GPUs),
                                 with a fix for each problem; exits 1 if anything is missing
  provision                      only provision the toolchain (target/weft-toolchain, or
                                 WEFT_TOOLCHAIN_DIR)
  layers [--check]               which top-level module of each crate imports which, the
                                 import cycles, and (where a crate has a LAYERS file) the
                                 arrows that point up its ladder; --check exits 1 on any
  help                           this text

Arguments after `--` go to cargo; test-binary arguments need a second `--`:
  cargo xtask test -- -p weft-host -- --nocapture
The benchmarks take their settings from the environment (bench/README.md):
  WEFT_BENCH_QUICK=1 WEFT_BENCH_CASES=allreduce cargo xtask bench -- --bench fused

Environment: WEFT_SKIP_PROVISION=1 never runs pip (offline, with an existing toolchain).";

/// A command line the user got wrong: exit 2 with the usage, unlike failures of the work.
#[derive(Debug)]
struct UsageError(String);

/// What the user asked for.
#[derive(Debug, PartialEq)]
enum Task {
    Test(Vec<OsString>),
    Bench(Vec<OsString>),
    Doctor,
    Provision,
    Layers { check: bool },
    Help,
}

fn main() -> ExitCode {
    let arguments: Vec<OsString> = std::env::args_os().skip(1).collect();
    let task = match parse(&arguments) {
        Ok(task) => task,
        Err(UsageError(message)) => {
            eprintln!("error: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(task) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn parse(arguments: &[OsString]) -> Result<Task, UsageError> {
    let Some((command, rest)) = arguments.split_first() else {
        return Err(UsageError("no command given".into()));
    };
    let forwarded = |rest: &[OsString]| -> Result<Vec<OsString>, UsageError> {
        match rest.split_first() {
            None => Ok(Vec::new()),
            Some((separator, cargo_args)) if separator == "--" => Ok(cargo_args.to_vec()),
            Some((unexpected, _)) => {
                Err(UsageError(format!("unexpected argument {unexpected:?}; pass cargo's arguments after `--`")))
            }
        }
    };
    let no_arguments = |task: Task| -> Result<Task, UsageError> {
        match rest.first() {
            None => Ok(task),
            Some(unexpected) => {
                Err(UsageError(format!("{} takes no arguments, got {unexpected:?}", command.to_string_lossy())))
            }
        }
    };
    match command.to_str() {
        Some("test") => Ok(Task::Test(forwarded(rest)?)),
        Some("bench") => Ok(Task::Bench(forwarded(rest)?)),
        Some("doctor") => no_arguments(Task::Doctor),
        Some("provision") => no_arguments(Task::Provision),
        Some("layers") => match rest {
            [] => Ok(Task::Layers { check: false }),
            [flag] if flag == "--check" => Ok(Task::Layers { check: true }),
            _ => Err(UsageError(format!("layers takes only --check, got {rest:?}"))),
        },
        Some("help" | "--help" | "-h") => Ok(Task::Help),
        _ => Err(UsageError(format!("unknown command {command:?}"))),
    }
}

fn run(task: Task) -> Result<ExitCode> {
    match task {
        Task::Help => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        Task::Doctor => {
            let problems = doctor::doctor(&Environment::from_process());
            Ok(if problems == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
        }
        Task::Provision => {
            let toolchain = ensure_toolchain(&toolchain_dir(&Environment::from_process()))?;
            describe(&toolchain)?;
            Ok(ExitCode::SUCCESS)
        }
        Task::Layers { check } => layers_of_every_crate(check),
        Task::Test(cargo_args) => run_cargo_suite("test", &cargo_args),
        Task::Bench(cargo_args) => run_cargo_suite("bench", &bench_arguments(cargo_args)),
    }
}

/// The crates whose module graphs `cargo xtask layers` reads: (name, source directory, ladder file).
const CRATES: &[(&str, &str)] = &[
    ("weft", "src"),
    ("weft-host", "host"),
    ("weft-device", "device"),
    ("weft-macros", "macros"),
    ("weft-kit", "kit"),
    ("weft-gin-loopback", "gin-loopback"),
    ("xtask", "xtask"),
];

/// Prints every crate's module graph; with `check`, fails on a cycle or an arrow up a crate's `LAYERS` ladder.
fn layers_of_every_crate(check: bool) -> Result<ExitCode> {
    let root = workspace_root();
    let mut clean = true;
    for (name, dir) in CRATES {
        let crate_dir = if *name == "weft" { root.clone() } else { root.join(dir) };
        let graph = layers::graph_of(&crate_dir.join("src"))?;
        let ladder_file = crate_dir.join("LAYERS");
        let ladder = match std::fs::read_to_string(&ladder_file) {
            Ok(text) => Some(layers::Ladder::parse(&text).with_context(|| format!("{}", ladder_file.display()))?),
            Err(_) => None,
        };
        let (text, ok) = layers::report(name, &graph, ladder.as_ref());
        print!("{text}");
        clean &= ok;
    }
    if check && !clean {
        say("layers: FAILED (an import cycle, or an arrow up a LAYERS ladder, above)");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `cargo test|bench --workspace <args>` with the toolchain's environment; cargo's output
/// streams straight through and its exit status becomes ours.
fn run_cargo_suite(subcommand: &str, cargo_args: &[OsString]) -> Result<ExitCode> {
    let root = workspace_root();
    let toolchain = ensure_toolchain(&toolchain_dir(&Environment::from_process()))?;
    describe(&toolchain)?;

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.current_dir(&root).arg(subcommand);
    // cargo lets --workspace override -p, which would silently run everything.
    if !selects_packages(cargo_args) {
        command.arg("--workspace");
    }
    // One failing suite must not hide the others: CI should report every failure in one run.
    if subcommand == "test" && !cargo_args.iter().any(|argument| argument == "--no-fail-fast") {
        command.arg("--no-fail-fast");
    }
    command.args(cargo_args);
    for (name, value) in toolchain.env()? {
        command.env(name, value);
    }
    say(&format!("running {}", describe_command(&command)));
    let status = command.status().with_context(|| format!("cannot run cargo {subcommand}"))?;
    if status.success() {
        say(&format!("cargo {subcommand}: passed"));
        return Ok(ExitCode::SUCCESS);
    }
    say(&format!("cargo {subcommand}: FAILED ({status})"));
    // A signal-killed cargo has no code; still fail.
    let code = status.code().and_then(|code| u8::try_from(code).ok());
    Ok(code.filter(|&code| code != 0).map_or(ExitCode::FAILURE, ExitCode::from))
}

/// The benchmarks `cargo xtask bench` runs unless told otherwise: the fused kernels against their unfused
/// baselines, and the DSL's cost against hand-written CUDA C++.
const DEFAULT_BENCHES: &[&str] = &["-p", "weft", "--bench", "fused", "--bench", "dsl"];

/// `cargo bench`'s arguments: the user's, after [`DEFAULT_BENCHES`] unless the user chose packages or targets.
fn bench_arguments(cargo_args: Vec<OsString>) -> Vec<OsString> {
    if selects_packages(&cargo_args) || selects_targets(&cargo_args) {
        return cargo_args;
    }
    DEFAULT_BENCHES.iter().map(OsString::from).chain(cargo_args).collect()
}

/// Whether cargo arguments (before any `--` meant for the binaries) pick targets (`--bench dsl`, `--lib`, …).
fn selects_targets(cargo_args: &[OsString]) -> bool {
    const TARGET_FLAGS: &[&str] =
        &["--lib", "--bin", "--bins", "--example", "--examples", "--test", "--tests", "--bench", "--benches"];
    cargo_args.iter().take_while(|argument| *argument != "--").filter_map(|argument| argument.to_str()).any(
        |argument| {
            argument == "--all-targets"
                || argument == "--workspace"
                || TARGET_FLAGS.iter().any(|flag| argument == *flag || argument.starts_with(&format!("{flag}=")))
        },
    )
}

/// Whether cargo arguments (before any `--` meant for the test binaries) pick packages.
fn selects_packages(cargo_args: &[OsString]) -> bool {
    cargo_args
        .iter()
        .take_while(|argument| *argument != "--")
        .filter_map(|argument| argument.to_str())
        .any(|argument| argument == "--package" || argument.starts_with("--package=") || argument.starts_with("-p"))
}

/// Prints what the toolchain holds and the environment the suites will get.
fn describe(toolchain: &Toolchain) -> Result<()> {
    say(&format!("toolchain  {}", toolchain.dir.display()));
    let version = nvcc_version(&toolchain.nvcc).context("the provisioned nvcc does not run")?;
    say(&format!("nvcc       {} ({version})", toolchain.nvcc.display()));
    for install in &toolchain.nccl {
        say(&format!(
            "NCCL {:<6} headers {} (NCCL_VERSION_CODE {})",
            install.version,
            install.include_dir.display(),
            install.version.code
        ));
        say(&format!("NCCL {:<6} libnccl {}", install.version, install.libnccl.display()));
    }
    for (name, value) in toolchain.env()? {
        say(&format!("export {name}={}", value.to_string_lossy()));
    }
    if std::env::var_os("NCCL_HOME").is_some() {
        say("note: NCCL_HOME is set in your environment and passed through unchanged");
    }
    Ok(())
}

/// Progress for humans, on stderr like cargo's own, so the two interleave in order.
pub(crate) fn say(message: &str) {
    eprintln!("xtask: {message}");
}

/// Runs a command with inherited output; a non-zero exit is an error naming the command.
pub(crate) fn run_checked(command: &mut Command) -> Result<()> {
    let shown = describe_command(command);
    say(&format!("running {shown}"));
    let status = command.status().with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed ({status})");
    }
    Ok(())
}

fn describe_command(command: &Command) -> String {
    std::iter::once(command.get_program())
        .chain(command.get_args())
        .map(|part| part.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_commands() {
        assert_eq!(parse(&arguments(&["test"])).unwrap(), Task::Test(vec![]));
        assert_eq!(parse(&arguments(&["doctor"])).unwrap(), Task::Doctor);
        assert_eq!(parse(&arguments(&["provision"])).unwrap(), Task::Provision);
        assert_eq!(parse(&arguments(&["bench"])).unwrap(), Task::Bench(vec![]));
    }

    #[test]
    fn forwards_everything_after_the_separator() {
        assert_eq!(
            parse(&arguments(&["test", "--", "-p", "weft-host", "--", "--nocapture"])).unwrap(),
            Task::Test(arguments(&["-p", "weft-host", "--", "--nocapture"]))
        );
    }

    #[test]
    fn rejects_bad_command_lines() {
        assert!(parse(&arguments(&[])).is_err());
        assert!(parse(&arguments(&["tset"])).is_err());
        assert!(parse(&arguments(&["test", "--release"])).is_err());
        assert!(parse(&arguments(&["doctor", "--verbose"])).is_err());
    }

    #[test]
    fn bench_runs_the_fused_and_dsl_benches_unless_told_otherwise() {
        let defaults = arguments(&["-p", "weft", "--bench", "fused", "--bench", "dsl"]);
        assert_eq!(bench_arguments(vec![]), defaults);
        let mut with_flags = defaults.clone();
        with_flags.extend(arguments(&["--features", "x", "--", "--quick"]));
        assert_eq!(bench_arguments(arguments(&["--features", "x", "--", "--quick"])), with_flags);
        for chosen in
            [&["--bench", "dsl"][..], &["--bench=fused"], &["-p", "weft-host"], &["--workspace"], &["--benches"]]
        {
            assert_eq!(bench_arguments(arguments(chosen)), arguments(chosen), "{chosen:?}");
        }
        // A `--bench` meant for the binaries (after `--`) chooses nothing.
        assert!(!selects_targets(&arguments(&["--", "--bench"])));
        assert!(!selects_targets(&arguments(&["--benchmark-flag"])));
    }

    #[test]
    fn package_selection_is_detected_before_the_test_binary_separator() {
        assert!(selects_packages(&arguments(&["-p", "weft-host"])));
        assert!(selects_packages(&arguments(&["-pweft-host"])));
        assert!(selects_packages(&arguments(&["--package=weft-host"])));
        assert!(!selects_packages(&arguments(&["--release"])));
        assert!(!selects_packages(&arguments(&["--", "-p"])));
    }
}
