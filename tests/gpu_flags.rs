//! GPU tests of stream waits on device flags (`DeviceBuffer::<u32>::stream_wait_at_least`, what example 08's
//! decoupled all-gather gates its GEMMs with), one rank: a wait holds back the work behind it until the flag rises
//! (written from another stream), a flag raised by a kernel (`allgather_signal`) releases it, a wait that never ends
//! is a deadline error rather than a hang, and an index past the flags is a typed error.

use weft_kit::kernels::gemm_tp::allgather_signal;

use std::time::Duration;

use half::bf16;
use weft::host::caps::Lsa;
use weft::host::{Communicator, Config, DevComm, DeviceBuffer, Error, UniqueId, WindowFlags};

fn one_rank() -> Communicator {
    Communicator::init_rank(0, 1, 0, &UniqueId::new().unwrap(), &Config::new()).unwrap()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_stream_waits_for_its_flag_and_no_longer() {
    let comm = one_rank();
    let (s, side) = (comm.context().new_stream().unwrap(), comm.context().new_stream().unwrap());
    let mut flags = DeviceBuffer::from_host(&side, &[0u32; 4]).unwrap();
    let past = flags.stream_wait_at_least(&s, 4, 1);
    assert!(matches!(past, Err(Error::InvalidArgument { argument: "index", .. })), "{past:?}");

    // Work behind a wait for flag 2 >= 7 (an asynchronous memset: nothing that blocks the host) does not run
    // while the flag is 0 ...
    let mut behind = s.clone_htod(&[1.0f32; 16]).unwrap();
    flags.stream_wait_at_least(&s, 2, 7).unwrap();
    s.memset_zeros(&mut behind).unwrap();
    let held = weft::host::cuda::settle_within(&s, Duration::from_millis(300));
    println!("with flag 2 at 0: {held:?}");
    assert!(matches!(held, Err(Error::Stalled { .. })), "the wait must hold the stream back: {held:?}");
    // ... and runs once another stream raises it.
    flags.copy_from_host(&[0, 0, 7, 0]).unwrap();
    weft::host::cuda::settle_within(&s, Duration::from_secs(10)).unwrap();
    assert_eq!(weft::host::cuda::download(&s, &behind).unwrap(), vec![0.0f32; 16], "the work behind the wait ran");
}

/// One rank's decoupled all-gather setup: the signal kernel's launch geometry, its device communicator, a window
/// holding `rows × k` known values, the gathered copy and `chunks` flags.
struct Setup<'c> {
    s: std::sync::Arc<cudarc::driver::CudaStream>,
    side: std::sync::Arc<cudarc::driver::CudaStream>,
    cfg: weft::host::LaunchConfig,
    dev: DevComm<'c, Lsa>,
    x_host: Vec<bf16>,
    x: weft::host::Window<'c, bf16>,
    staged: DeviceBuffer<bf16>,
    ready: DeviceBuffer<u32>,
}

const ROWS: usize = 512;
const K: usize = 256;
const CHUNK: usize = 128 * K;

fn setup(comm: &Communicator) -> Setup<'_> {
    let (s, side) = (comm.context().new_stream().unwrap(), comm.context().new_stream().unwrap());
    let cfg = allgather_signal::one_wave::<bf16>(comm, &side, 512).unwrap();
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&allgather_signal::requirements(&cfg)).unwrap();
    let x_host: Vec<bf16> = (0..ROWS * K).map(|i| bf16::from_f32((i % 251) as f32)).collect();
    let mut x = comm.alloc_window::<bf16>(&side, ROWS * K, WindowFlags::COLL_SYMMETRIC).unwrap();
    x.buffer_mut().copy_from_host(&x_host).unwrap();
    let staged = DeviceBuffer::<bf16>::new(&side, ROWS * K).unwrap();
    let ready = DeviceBuffer::from_host(&side, &[0u32; 4]).unwrap();
    Setup { s, side, cfg, dev, x_host, x, staged, ready }
}

impl Setup<'_> {
    fn raise(&mut self, epoch: u32) {
        allgather_signal::launch(
            &self.side,
            self.cfg,
            &self.dev,
            &self.x,
            &mut self.staged,
            &mut self.ready,
            ROWS * K,
            CHUNK,
            epoch,
        )
        .unwrap();
    }

    fn check(&self, epoch: u32, done: &cudarc::driver::CudaSlice<u32>) {
        weft::host::cuda::settle_within(&self.s, Duration::from_secs(20)).unwrap();
        assert_eq!(weft::host::cuda::download(&self.s, done).unwrap(), vec![0], "round {epoch}: the waits let go");
        weft::host::cuda::settle(&self.side).unwrap();
        assert_eq!(self.ready.copy_to_host().unwrap(), vec![epoch; 4], "round {epoch}: every chunk's flag");
        assert!(self.staged.copy_to_host().unwrap() == self.x_host, "round {epoch}: the copy is the input (1 rank)");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn flags_raised_by_a_kernel_release_the_waits_in_order() {
    // The order example 08 uses: the kernel that raises the flags is launched, then the waits are enqueued.
    let comm = one_rank();
    let mut t = setup(&comm);
    for epoch in 1..=3u32 {
        let mut done = t.s.clone_htod(&[epoch]).unwrap();
        t.raise(epoch);
        for c in 0..4 {
            t.ready.stream_wait_at_least(&t.s, c, epoch).unwrap();
        }
        t.s.memset_zeros(&mut done).unwrap();
        t.check(epoch, &done);
        println!("round {epoch}: four waits released by the kernel's flags; the copy is exact");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn waits_enqueued_before_the_kernel_that_raises_them() {
    // The waits first, the kernel after: the stream that waits must not hold back a kernel on another stream. The
    // first round launches the kernel for the first time in this process behind a waiting stream; the side stream
    // is settled first, so a kernel that cannot start shows as the side stream stalling.
    let comm = one_rank();
    let mut t = setup(&comm);
    for epoch in 1..=3u32 {
        let mut done = t.s.clone_htod(&[epoch]).unwrap();
        for c in 0..4 {
            t.ready.stream_wait_at_least(&t.s, c, epoch).unwrap();
        }
        t.s.memset_zeros(&mut done).unwrap();
        t.raise(epoch);
        let side = weft::host::cuda::settle_within(&t.side, Duration::from_secs(10));
        println!("round {epoch}: the kernel behind the waits: {side:?}");
        side.unwrap();
        t.check(epoch, &done);
        println!("round {epoch}: four waits released by the kernel's flags; the copy is exact");
    }
}
