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

#[test]
#[ignore = "needs a CUDA GPU"]
fn flags_raised_by_a_kernel_release_the_waits_in_order() {
    let comm = one_rank();
    let (s, side) = (comm.context().new_stream().unwrap(), comm.context().new_stream().unwrap());
    let (rows, k) = (512, 256);
    let chunk = 128 * k;
    let cfg = allgather_signal::one_wave::<bf16>(&comm, &side, 512).unwrap();
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&allgather_signal::requirements(&cfg)).unwrap();
    let x_host: Vec<bf16> = (0..rows * k).map(|i| bf16::from_f32((i % 251) as f32)).collect();
    let mut x = comm.alloc_window::<bf16>(&side, rows * k, WindowFlags::COLL_SYMMETRIC).unwrap();
    x.buffer_mut().copy_from_host(&x_host).unwrap();
    let mut staged = DeviceBuffer::<bf16>::new(&side, rows * k).unwrap();
    let mut ready = DeviceBuffer::from_host(&side, &[0u32; 4]).unwrap();
    for epoch in 1..=3u32 {
        // Every chunk's wait is enqueued on `s` before the kernel that raises the flags is launched on `side`; a
        // memset behind them shows when they let go.
        let mut done = s.clone_htod(&[epoch]).unwrap();
        for c in 0..4 {
            ready.stream_wait_at_least(&s, c, epoch).unwrap();
        }
        s.memset_zeros(&mut done).unwrap();
        allgather_signal::launch(&side, cfg, &dev, &x, &mut staged, &mut ready, rows * k, chunk, epoch).unwrap();
        weft::host::cuda::settle_within(&s, Duration::from_secs(20)).unwrap();
        assert_eq!(weft::host::cuda::download(&s, &done).unwrap(), vec![0], "round {epoch}: the waits let go");
        weft::host::cuda::settle(&side).unwrap();
        assert_eq!(ready.copy_to_host().unwrap(), vec![epoch; 4], "round {epoch}: every chunk's flag");
        assert!(staged.copy_to_host().unwrap() == x_host, "round {epoch}: the gathered copy is the input (1 rank)");
        println!("round {epoch}: four waits released by the kernel's flags; the copy is exact");
    }
}
