//! Where is every thread? A hang diagnostic for jobs whose machines have no debugger.
//!
//! With `WEFT_STACKS=1` in the environment, the first communicator weft creates installs a `SIGUSR2` handler: send the
//! process that signal (`kill -USR2 <pid>`) and every thread prints its name, id and raw return addresses to stderr,
//! after the process's mappings. The addresses are not symbolized in the process (release binaries are
//! usually stripped); `scripts/symbolize.py` turns such a dump into function names with the unstripped binary and the
//! libraries' symbol tables, on any machine. `scripts/hang-dump.sh` sends the signal before it kills a run that passed
//! its deadline.
//!
//! The handler is for diagnosing a process that is about to be killed: it allocates and formats, which is not
//! async-signal-safe, so a thread interrupted inside the allocator may print nothing. It never changes what a
//! running program computes, and without `WEFT_STACKS=1` nothing is installed.

use std::ffi::c_void;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

const FRAMES: usize = 48;

/// Installs the `SIGUSR2` stack dump when `WEFT_STACKS=1` is set (once per process; later calls do nothing).
pub fn install_from_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var("WEFT_STACKS").is_ok_and(|v| v == "1") {
            install();
        }
    });
}

/// Installs the `SIGUSR2` stack dump unconditionally.
pub fn install() {
    // SAFETY: a zeroed sigaction is a valid starting value; the handler is an `extern "C" fn(c_int)` as
    // `sa_sigaction` without SA_SIGINFO expects, and it lives for the whole process.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGUSR2, &action, std::ptr::null_mut()) != 0 {
            tracing::warn!("WEFT_STACKS: sigaction(SIGUSR2) failed; no stack dumps");
        }
    }
}

extern "C" fn on_signal(_: libc::c_int) {
    static FORWARDED: AtomicBool = AtomicBool::new(false);
    // SAFETY: getpid/gettid take no arguments and cannot fail.
    let (pid, me) = unsafe { (libc::getpid(), libc::gettid()) };
    if !FORWARDED.swap(true, Ordering::SeqCst) {
        // The process-directed signal reached one thread: print the mappings once and pass it on to the others.
        // Each file's first mapping (offset 0: its load address) and its executable ones.
        let mut text = String::from("weft stacks: mappings\n");
        if let Ok(maps) = std::fs::read_to_string("/proc/self/maps") {
            let wanted = |l: &&str| {
                let fields: Vec<&str> = l.split_whitespace().collect();
                fields.len() >= 6 && (fields[1].contains('x') || fields[2].trim_start_matches('0').is_empty())
            };
            for line in maps.lines().filter(wanted) {
                let _ = writeln!(text, "  map {line}");
            }
        }
        emit(&text);
        if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
            for tid in tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse::<libc::pid_t>().ok()) {
                if tid != me {
                    // SAFETY: tgkill with this process's id and one of its threads' ids; a thread that has exited
                    // since the listing makes it return ESRCH, which is ignored.
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR2) };
                }
            }
        }
    }
    let name = std::fs::read_to_string(format!("/proc/self/task/{me}/comm")).unwrap_or_default();
    let mut text = format!("weft stacks: thread {me} {}\n", name.trim());
    let mut frames = Vec::with_capacity(FRAMES);
    // SAFETY: `collect` receives the Vec passed as `arg` for the duration of the call and pushes at most FRAMES
    // addresses into its reserved capacity.
    unsafe { _Unwind_Backtrace(collect, (&mut frames as *mut Vec<usize>).cast()) };
    for ip in frames {
        let _ = writeln!(text, "  at {ip:#x}");
    }
    emit(&text);
}

fn emit(text: &str) {
    // SAFETY: writes `text.len()` bytes of a live string to stderr; a short or failed write only loses diagnostics.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// The unwinder's context, opaque here.
#[repr(C)]
struct UnwindContext {
    _private: [u8; 0],
}

const URC_NO_REASON: libc::c_int = 0;
const URC_END_OF_STACK: libc::c_int = 5;

// The Itanium C++ ABI unwinder (libgcc_s), which the Rust standard library links on Linux.
extern "C" {
    fn _Unwind_Backtrace(
        trace: extern "C" fn(*mut UnwindContext, *mut c_void) -> libc::c_int,
        arg: *mut c_void,
    ) -> libc::c_int;
    fn _Unwind_GetIP(context: *mut UnwindContext) -> usize;
}

extern "C" fn collect(context: *mut UnwindContext, arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Vec<usize>` `on_signal` passed to `_Unwind_Backtrace`, alive for this call.
    let frames = unsafe { &mut *arg.cast::<Vec<usize>>() };
    // SAFETY: `context` is the unwinder's own, valid during this callback.
    let ip = unsafe { _Unwind_GetIP(context) };
    if ip == 0 || frames.len() == FRAMES {
        return URC_END_OF_STACK;
    }
    frames.push(ip);
    URC_NO_REASON
}
