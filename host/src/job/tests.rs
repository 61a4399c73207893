use std::collections::HashMap;

use super::*;

fn job(vars: &[(&str, &str)]) -> Result<Option<Job>, Error> {
    let table: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Job::from_vars(|name| table.get(name).cloned())
}

fn error_text(vars: &[(&str, &str)]) -> String {
    job(vars).expect_err("must be refused").to_string()
}

#[test]
fn no_launcher_is_no_job() {
    assert_eq!(job(&[]).unwrap(), None);
    assert_eq!(job(&[("HOME", "/root"), ("MASTER_ADDR", "h")]).unwrap(), None);
}

#[test]
fn torchrun() {
    let vars = [
        ("RANK", "5"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "8"),
        ("MASTER_ADDR", "10.0.0.7"),
        ("MASTER_PORT", "29500"),
        ("TORCHELASTIC_RUN_ID", "x"),
    ];
    let job = job(&vars).unwrap().unwrap();
    assert_eq!(job.launcher, Launcher::Torchrun);
    assert_eq!((job.rank, job.world_size, job.local_rank, job.local_world_size), (5, 16, 1, 8));
    assert_eq!(job.comm_id_address().unwrap(), "10.0.0.7:29501", "torchrun's store has MASTER_PORT itself");
    assert_eq!(job.to_string(), "rank 5/16 (local 1/8) started by torchrun, root 10.0.0.7");
    let missing = error_text(&vars[..5]);
    assert!(missing.contains("MASTER_PORT") && missing.contains("not set"), "{missing}");
    let mut bad = vars;
    bad[0] = ("RANK", "five");
    assert!(error_text(&bad).contains("`RANK`: is `five`"));
}

#[test]
fn slurm_with_a_compressed_task_list_and_a_node_list() {
    let vars = [
        ("SLURM_PROCID", "9"),
        ("SLURM_NTASKS", "11"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "2"),
        ("SLURM_STEP_TASKS_PER_NODE", "4(x2),3"),
        ("SLURM_STEP_NODELIST", "gpu[07-09,12],login1"),
    ];
    let job = job(&vars).unwrap().unwrap();
    assert_eq!(job.launcher, Launcher::Slurm);
    assert_eq!((job.rank, job.world_size, job.local_rank, job.local_world_size), (9, 11, 1, 3));
    assert_eq!(job.root_host.as_deref(), Some("gpu07"));
    assert_eq!(job.comm_id_address().unwrap(), format!("gpu07:{DEFAULT_COMM_PORT}"));
    // MASTER_ADDR wins over the node list; WEFT_COMM_PORT over everything.
    let mut with_master = vars.to_vec();
    with_master.extend([("MASTER_ADDR", "head"), ("MASTER_PORT", "1234"), ("WEFT_COMM_PORT", "4000")]);
    assert_eq!(self::job(&with_master).unwrap().unwrap().comm_id_address().unwrap(), "head:4000");
    let mut beyond = vars;
    beyond[3] = ("SLURM_NODEID", "3");
    assert!(error_text(&beyond).contains("lists 3 nodes, but this is node 3"));
    assert_eq!(first_host("L", "node1,node2").unwrap(), "node1");
    assert_eq!(first_host("L", "a[3-5]").unwrap(), "a3");
    assert!(first_host("L", "a[x-5]").is_err());
    assert_eq!(tasks_on_node("T", "8", 0).unwrap(), 8);
    assert!(tasks_on_node("T", "8(x", 0).is_err());
}

#[test]
fn open_mpi_and_mpich_need_a_root_only_for_the_id() {
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "3"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "3"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ];
    let job = job(&ompi).unwrap().unwrap();
    assert_eq!((job.launcher, job.rank, job.local_world_size), (Launcher::OpenMpi, 3, 4));
    let why = job.comm_id_address().unwrap_err().to_string();
    assert!(why.contains("MASTER_ADDR") && why.contains("UniqueId"), "{why}");
    let mpich = [
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "2"),
        ("MPI_LOCALRANKID", "0"),
        ("MPI_LOCALNRANKS", "2"),
        ("MASTER_ADDR", "::1"),
    ];
    let job = self::job(&mpich).unwrap().unwrap();
    assert_eq!(job.launcher, Launcher::Mpich);
    assert_eq!(job.comm_id_address().unwrap(), format!("[::1]:{DEFAULT_COMM_PORT}"));
}

#[test]
fn weft_variables_override_the_launchers() {
    let vars = [("WEFT_RANK", "1"), ("WEFT_WORLD_SIZE", "2"), ("WEFT_ROOT", "[fe80::1]:7000"), ("RANK", "0")];
    let job = job(&vars).unwrap().unwrap();
    assert_eq!(
        (job.launcher, job.rank, job.world_size, job.local_rank, job.local_world_size),
        (Launcher::Weft, 1, 2, 0, 1)
    );
    assert_eq!(job.comm_id_address().unwrap(), "[fe80::1]:7001");
    assert!(error_text(&[("WEFT_RANK", "0"), ("WEFT_WORLD_SIZE", "1"), ("WEFT_ROOT", "nohost")]).contains("host:port"));
}

#[test]
fn inconsistent_numbers_are_named() {
    let base = [("WEFT_WORLD_SIZE", "4"), ("WEFT_LOCAL_WORLD_SIZE", "2")];
    let with = |extra: &[(&'static str, &'static str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        error_text(&v)
    };
    assert!(with(&[("WEFT_RANK", "4")]).contains("rank 4 of 4 ranks"));
    assert!(with(&[("WEFT_RANK", "0"), ("WEFT_LOCAL_RANK", "2")]).contains("local rank 2 of 2"));
    assert!(error_text(&[("WEFT_RANK", "0"), ("WEFT_WORLD_SIZE", "0")]).contains("0 ranks"));
    assert!(error_text(&[("WEFT_RANK", "0"), ("WEFT_WORLD_SIZE", "2"), ("WEFT_LOCAL_WORLD_SIZE", "4")])
        .contains("4 ranks on this node"));
}

#[test]
fn ranks_wrap_around_the_node_s_gpus() {
    let job = |local_rank: usize, local_world_size: usize| Job {
        launcher: Launcher::Weft,
        rank: local_rank,
        world_size: local_world_size,
        local_rank,
        local_world_size,
        root_host: None,
        root_port: None,
        comm_port: None,
    };
    assert_eq!((job(3, 8).device(8), job(3, 8).ranks_on_gpu(8)), (3, 1));
    assert_eq!((job(5, 8).device(2), job(5, 8).ranks_on_gpu(2)), (1, 4));
    assert_eq!((job(2, 3).device(2), job(2, 3).ranks_on_gpu(2)), (0, 2));
}
