//! CUDA's hardware queues for ranks that share a GPU in one process (docs/multi-rank.md, "Hardware queues"): a
//! placement that repeats a device sets `CUDA_DEVICE_MAX_CONNECTIONS=32` where the environment leaves it unset, and
//! keeps a value the user set. Making a placement needs no GPU. Each case runs in a child process (this test binary
//! again), since the setting changes the process's environment.

use std::process::Command;

use weft_host::placement::{QUEUES_VARIABLE, SHARED_GPU_QUEUES};
use weft_host::Placement;

const CHILD: &str = "WEFT_QUEUES_TEST_CHILD";

/// Runs `test` in a child with `QUEUES_VARIABLE` set to `preset` (unset for `None`) and returns what the child
/// printed: the variable's value after its placement.
fn in_child(test: &str, preset: Option<&str>) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", test, "--nocapture", "--test-threads=1"]).env(CHILD, "1");
    match preset {
        Some(value) => command.env(QUEUES_VARIABLE, value),
        None => command.env_remove(QUEUES_VARIABLE),
    };
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "the child failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    // libtest prints the test's name on the line the child's output continues.
    let marker = "queues after placement: ";
    stdout
        .lines()
        .find_map(|l| l.find(marker).map(|at| l[at + marker.len()..].trim().to_string()))
        .unwrap_or_else(|| format!("nothing printed: {stdout}"))
}

/// The child's half: make `devices`' placement, print the variable.
fn child(devices: Vec<usize>) {
    Placement::new(devices).unwrap();
    let value = std::env::var(QUEUES_VARIABLE).unwrap_or_else(|_| "unset".into());
    println!("queues after placement: {value}");
}

#[test]
fn a_placement_sharing_a_gpu_asks_for_32_queues_where_unset() {
    if std::env::var_os(CHILD).is_some() {
        return child(vec![0, 0, 0, 0]);
    }
    let test = "a_placement_sharing_a_gpu_asks_for_32_queues_where_unset";
    assert_eq!(in_child(test, None), SHARED_GPU_QUEUES.to_string());
    // A value the user set is theirs: spmd refuses it later if it is too small (Error::TooFewQueues).
    assert_eq!(in_child(test, Some("8")), "8");
    assert_eq!(in_child(test, Some("32")), "32");
}

#[test]
fn a_placement_of_one_rank_per_gpu_leaves_the_queues_alone() {
    if std::env::var_os(CHILD).is_some() {
        return child(vec![0, 1, 2, 3]);
    }
    assert_eq!(in_child("a_placement_of_one_rank_per_gpu_leaves_the_queues_alone", None), "unset");
}
