//! `WEFT_STACKS` (host/src/stacks.rs): a process that installed the dump prints every thread's stack on `SIGUSR2`.
//! The dump runs in a child process (this test binary again), since it writes to the process's stderr.

use std::process::Command;
use std::time::Duration;

const CHILD: &str = "WEFT_STACKS_TEST_CHILD";

#[test]
fn sigusr2_prints_every_threads_return_addresses() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sigusr2_prints_every_threads_return_addresses", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the child failed: {stderr}");
    assert!(stderr.contains("weft stacks: mappings"), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("  map ") && l.contains("r-xp")), "no executable mapping: {stderr}");
    // Both threads print, each with return addresses.
    for name in ["parked-thread", "sigusr2_prints"] {
        let at = stderr.find(&format!(" {name}")).unwrap_or_else(|| panic!("no stack of {name}: {stderr}"));
        assert!(stderr[at..].lines().nth(1).is_some_and(|l| l.starts_with("  at 0x")), "{stderr}");
    }
}

fn child() {
    weft_host::stacks::install();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let parked = std::thread::Builder::new().name("parked-thread".into()).spawn(move || rx.recv()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: sends this process a signal whose handler was installed above.
    unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) };
    std::thread::sleep(Duration::from_millis(500));
    tx.send(()).unwrap();
    parked.join().unwrap().unwrap();
}
