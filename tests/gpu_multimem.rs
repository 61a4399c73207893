//! The multimem (NVLink SHARP) all-reduce + bias + residual (kit/src/kernels/allreduce_multimem.rs) on every rank of
//! the placement (`WEFT_RANKS`, else one rank per GPU). Where the communicator has multimem, every rank's result is
//! checked against the f64 host reference in f32 and bf16. Where it has not (one GPU, no NVSwitch, or
//! `NCCL_NVLS_ENABLE=0`, as on weft's GPU machine), asking for the device communicator the kernel needs must fail
//! with `Error::MissingCapability { capability: "multimem" }` that says why, before anything is launched; the test
//! checks that refusal and says that the kernel itself did not run.

use weft_kit::common::{self, Real};
use weft_kit::kernels::allreduce_multimem::allreduce_bias_residual_multimem as kernel;

use weft::host::caps::LsaMultimem;
use weft::host::{Config, DevComm, Error, Placement, WindowFlags};

const BLOCK: u32 = 256;
const BIAS_SEED: u64 = 11;
const RESIDUAL_SEED: u64 = 12;

/// `sum over ranks of x + bias + residual` in f64, from the values as rounded to `T`.
fn reference<T: Real>(nranks: usize, n: usize, hidden: usize) -> Vec<f64> {
    let bias = common::random_as::<T>(hidden, BIAS_SEED);
    let residual = common::random_as::<T>(n, RESIDUAL_SEED);
    let xs: Vec<Vec<T>> = (0..nranks).map(|r| common::random_as::<T>(n, 100 + r as u64)).collect();
    (0..n)
        .map(|i| residual[i].value() + bias[i % hidden].value() + xs.iter().map(|x| x[i].value()).sum::<f64>())
        .collect()
}

/// What one rank saw: the relative error of its result, or the refusal.
#[derive(Debug)]
enum Outcome {
    Ran(f64),
    Refused(String),
}

fn run<T: Real + weft::device::MultimemElement>(placement: &Placement, rows: usize, hidden: usize) -> Vec<Outcome> {
    let nranks = placement.nranks();
    let n = rows * hidden;
    let want = reference::<T>(nranks, n, hidden);
    weft::host::spmd(placement.devices(), &Config::new(), |comm| {
        let s = comm.context().new_stream()?;
        let cfg = kernel::one_wave::<T>(comm, &s, BLOCK)?;
        let dev: DevComm<'_, LsaMultimem> = match comm.dev_comm(&kernel::requirements(&cfg)) {
            Ok(dev) => dev,
            Err(Error::MissingCapability { capability, reason }) => {
                assert_eq!(capability, "multimem");
                return Ok(Outcome::Refused(reason));
            }
            Err(other) => return Err(other),
        };
        let mut x = comm.alloc_window::<T>(&s, n, WindowFlags::COLL_SYMMETRIC)?;
        x.buffer_mut().copy_from_host(&common::random_as::<T>(n, 100 + comm.rank() as u64))?;
        let bias = s.clone_htod(&common::random_as::<T>(hidden, BIAS_SEED))?;
        let residual = s.clone_htod(&common::random_as::<T>(n, RESIDUAL_SEED))?;
        let mut out = s.clone_htod(&vec![T::nan(); n])?;
        kernel::launch(&s, cfg, &dev, &x, &bias, &residual, &mut out, n, hidden)?;
        let got = weft::host::cuda::download(&s, &out)?;
        Ok(Outcome::Ran(common::relative_error(&got, &want)))
    })
    .unwrap()
}

fn check<T: Real + weft::device::MultimemElement>(placement: &Placement) {
    let outcomes = run::<T>(placement, 64, 4096);
    for (rank, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Outcome::Ran(error) => {
                println!("multimem {} rank {rank}: relative error {error:.1e}", common::type_name::<T>());
                assert!(*error < T::TOLERANCE, "rank {rank}: {error}");
            }
            Outcome::Refused(reason) => {
                println!(
                    "multimem {} rank {rank}: refused before launch, as it must be without NVLink SHARP ({reason}); \
                     the kernel did not run",
                    common::type_name::<T>()
                );
                assert!(!reason.is_empty());
            }
        }
    }
    // All ranks of one communicator agree on its properties.
    let ran = outcomes.iter().filter(|o| matches!(o, Outcome::Ran(_))).count();
    assert!(ran == 0 || ran == outcomes.len(), "ranks disagree on multimem: {outcomes:?}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn multimem_allreduce_matches_the_host_reference_or_is_refused_on_every_rank() {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    check::<f32>(&placement);
    check::<half::bf16>(&placement);
}
