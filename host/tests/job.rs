//! N processes started with a synthetic launcher environment (torchrun's variables), and N processes started by a
//! real launcher (MPICH's `mpiexec`, which `cargo xtask test` provisions from its pip wheel), must agree on the NCCL
//! unique id without any networking of weft's own: each runs `Job::from_env()?.unique_id()` against the real libnccl
//! 2.28.9 that `cargo xtask test` provisions (NCCL's `NCCL_COMM_ID` path needs no GPU).

use std::process::Command;

const CHILD: &str = "WEFT_TEST_JOB_CHILD";

/// The children's report lines in `text`: from each `weft-job-child` marker to the end of its line. Children that
/// share one pipe (under mpiexec) write each report in one piece, but another child's test-harness output may still
/// be unfinished in front of it on the same line (seen in CI: `test result: okweft-job-child rank=3 …`).
fn child_lines(text: &str) -> Vec<&str> {
    text.match_indices("weft-job-child").map(|(at, _)| text[at..].lines().next().unwrap_or_default()).collect()
}

/// The part each child process runs: prints its rank and the id. Skips (passes) outside the parent's children.
#[test]
#[ignore = "run by every_rank_of_a_synthetic_torchrun_job_derives_the_same_unique_id in child processes"]
fn job_child_prints_its_unique_id() {
    if std::env::var_os(CHILD).is_none() {
        println!("skipped: the parent test runs this in child processes");
        return;
    }
    let job = weft_host::Job::from_env().unwrap().expect("the parent started this under a launcher");
    let id = job.unique_id().unwrap();
    println!(
        "weft-job-child rank={} world={} local={}/{} launcher={:?} id={id}",
        job.rank, job.world_size, job.local_rank, job.local_world_size, job.launcher
    );
}

#[test]
fn every_rank_of_a_synthetic_torchrun_job_derives_the_same_unique_id() {
    let library = std::env::var("WEFT_TEST_LIBNCCL_2_28_9").unwrap_or_else(|_| {
        panic!(
            "WEFT_TEST_LIBNCCL_2_28_9 is not set: run the tests through `cargo xtask test`, which provisions libnccl"
        )
    });
    let me = std::env::current_exe().unwrap();
    let world = 4;
    let mut ids = Vec::new();
    for rank in 0..world {
        let out = Command::new(&me)
            .args(["--ignored", "--exact", "job_child_prints_its_unique_id", "--nocapture"])
            .env(CHILD, "1")
            .env("WEFT_LIBNCCL", &library)
            .env_remove("NCCL_COMM_ID")
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", "29555")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "rank {rank}: {text}{}", String::from_utf8_lossy(&out.stderr));
        let line = *child_lines(&text).first().unwrap_or_else(|| panic!("rank {rank}: {text}"));
        assert!(line.contains(&format!("rank={rank} ")), "{line}");
        ids.push(line.split("id=").nth(1).unwrap().to_owned());
    }
    println!("{world} processes, one id: {}…", &ids[0][..16]);
    assert!(ids.iter().all(|id| *id == ids[0]), "the ranks disagree on the unique id: {ids:#?}");
    assert_eq!(ids[0].len(), 256);
}

/// The same agreement under a real launcher: `mpiexec -n 4` (MPICH's Hydra) starts the children, which find their
/// rank, world size and local rank in Hydra's variables (`PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID`, `MPI_LOCALNRANKS`)
/// and the root in `MASTER_ADDR` (MPI names none).
#[test]
fn every_rank_started_by_mpiexec_derives_the_same_unique_id() {
    let library = std::env::var("WEFT_TEST_LIBNCCL_2_28_9")
        .unwrap_or_else(|_| panic!("WEFT_TEST_LIBNCCL_2_28_9 is not set: run the tests through `cargo xtask test`"));
    let mpiexec = std::env::var("WEFT_TEST_MPIEXEC").unwrap_or_else(|_| {
        panic!(
            "WEFT_TEST_MPIEXEC is not set: run the tests through `cargo xtask test`, which provisions MPICH's mpiexec"
        )
    });
    let me = std::env::current_exe().unwrap();
    let world = 4;
    let mut command = Command::new(&mpiexec);
    command
        .args(["-n", &world.to_string()])
        .arg(&me)
        .args(["--ignored", "--exact", "job_child_prints_its_unique_id", "--nocapture"])
        .env(CHILD, "1")
        .env("WEFT_LIBNCCL", &library)
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", "29556");
    // Only Hydra's variables may name the ranks: another launcher's, inherited from the test runner, would win.
    for variable in
        ["NCCL_COMM_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "WEFT_RANK", "SLURM_PROCID"]
    {
        command.env_remove(variable);
    }
    let out = command.output().unwrap_or_else(|e| panic!("cannot run {mpiexec}: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "mpiexec failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = child_lines(&text);
    lines.sort_by_key(|line| line.split("rank=").nth(1).and_then(|r| r.split(' ').next()).map(str::to_owned));
    assert_eq!(lines.len(), world, "one line per rank: {text}");
    for (rank, line) in lines.iter().enumerate() {
        assert!(line.contains(&format!("rank={rank} world={world} local={rank}/{world} launcher=Mpich")), "{line}");
    }
    let ids: Vec<&str> = lines.iter().map(|line| line.split("id=").nth(1).unwrap()).collect();
    println!("mpiexec -n {world}: {world} processes, one id: {}…", &ids[0][..16]);
    assert!(ids.iter().all(|id| *id == ids[0]), "the ranks disagree on the unique id: {ids:#?}");
}

/// The report lines are found where another child's unfinished output precedes them on the same line.
#[test]
fn child_reports_are_found_behind_interleaved_output() {
    let text =
        "test result: ok. 1 passed\nweft-job-child rank=0 id=aa\n\ntest result: okweft-job-child rank=3 id=aa\n.\n";
    assert_eq!(child_lines(text), ["weft-job-child rank=0 id=aa", "weft-job-child rank=3 id=aa"]);
}
