//! The entry points as NCCL calls them, with host memory standing in for device memory (`HostEngine`), one thread
//! per rank; the CUDA engine on a GPU at the end.

use std::ffi::{c_int, c_void};
use std::mem::offset_of;
use std::ptr::null_mut;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use crate::ffi::{self, NetProperties, RmaConfig, RmaV14};
use crate::group::{self, Handle, Part, HANDLE_BYTES};
use crate::ncclRmaPlugin_v14 as PLUGIN;

fn plugin() -> &'static RmaV14 {
    &PLUGIN
}

/// Offsets and sizes of NCCL 2.30.7's `ncclNetProperties_v12_t`, `ncclRma_v14_t` and `ncclRmaConfig_v14_t` on
/// x86-64, printed by `offsetof`/`sizeof` in a C++ program compiled with g++ against NCCL's
/// `src/include/plugin/nccl_rma.h`.
#[test]
fn layouts_match_nccls_headers() {
    assert_eq!(std::mem::size_of::<NetProperties>(), 128);
    assert_eq!(offset_of!(NetProperties, ptr_support), 24);
    assert_eq!(offset_of!(NetProperties, latency), 44);
    assert_eq!(offset_of!(NetProperties, net_device_type), 56);
    assert_eq!(offset_of!(NetProperties, v_props), 64);
    assert_eq!(offset_of!(NetProperties, max_p2p_bytes), 104);
    assert_eq!(offset_of!(NetProperties, max_multi_request_size), 120);
    assert_eq!(offset_of!(NetProperties, plane_id), 126);
    assert_eq!(std::mem::size_of::<RmaV14>(), 168);
    assert_eq!(offset_of!(RmaV14, iput), 104);
    assert_eq!(offset_of!(RmaV14, test), 136);
    assert_eq!(offset_of!(RmaV14, finalize), 160);
    assert_eq!(std::mem::size_of::<RmaConfig>(), 12);
}

#[test]
fn the_table_reports_a_gin_proxy_device() {
    let p = plugin();
    let mut ndev = 0;
    // SAFETY: a pointer to a live int.
    assert_eq!(unsafe { p.devices.unwrap()(&mut ndev) }, ffi::SUCCESS);
    assert_eq!(ndev, 1);
    // SAFETY: the all-zero bit pattern is a valid NetProperties (null pointers, zero numbers).
    let mut props: NetProperties = unsafe { std::mem::zeroed() };
    // SAFETY: a pointer to a live NetProperties.
    assert_eq!(unsafe { p.get_properties.unwrap()(0, &mut props) }, ffi::SUCCESS);
    assert_eq!(props.net_device_type, ffi::NET_DEVICE_GIN_PROXY);
    assert_eq!(props.ptr_support, ffi::PTR_HOST | ffi::PTR_CUDA, "no DMA-BUF: NCCL must register by address");
    assert!(props.max_recvs >= 1);
    // SAFETY: as above.
    assert_eq!(unsafe { p.get_properties.unwrap()(1, &mut props) }, ffi::INVALID_ARGUMENT);
}

#[test]
fn handles_round_trip_and_foreign_ones_are_refused() {
    let handle = Handle::new();
    assert_eq!(Handle::from_bytes(&handle.to_bytes()), Some(handle));
    assert_eq!(Handle::from_bytes(&[7u8; HANDLE_BYTES]), None);

    let ours = Handle::new().to_bytes();
    let error = group::join(&[ours, [7u8; HANDLE_BYTES]], 0).unwrap_err();
    assert_eq!(error.code, ffi::INVALID_USAGE);
    assert!(error.message.contains("rank 1") && error.message.contains("NCCL_RMA_PLUGIN"), "{error}");

    let elsewhere = Handle { process: std::process::id().wrapping_add(1), nonce: 1 }.to_bytes();
    let error = group::join(&[Handle::new().to_bytes(), elsewhere], 0).unwrap_err();
    assert_eq!(error.code, ffi::INVALID_USAGE);
    assert!(error.message.contains("threads of one process"), "{error}");
}

#[test]
fn a_rank_whose_peer_never_registers_gets_an_error_after_the_deadline() {
    let handles = [Handle::new().to_bytes(), Handle::new().to_bytes()];
    let group = group::join(&handles, 0).unwrap();
    let _peer = group::join(&handles, 1).unwrap();
    let part = Part { base: 0x1000, len: 64, kind: ffi::PTR_CUDA };
    let error = group.register(0, 0, part, Duration::from_millis(50)).unwrap_err();
    assert_eq!(error.code, ffi::SYSTEM_ERROR);
    assert!(error.message.contains("ranks [1]") && error.message.contains("collective"), "{error}");
    // The late peer's registration does not complete with the part the first rank took back.
    let error = group.register(0, 1, part, Duration::from_millis(50)).unwrap_err();
    assert!(error.message.contains("ranks [0]"), "{error}");
}

/// One rank's view of a loopback connection, set up through the entry points as NCCL does it.
struct Rank {
    rank: usize,
    instance: *mut c_void,
    connection: *mut c_void,
    context: *mut c_void,
}

// SAFETY: the pointers are this backend's own objects, which are Send + Sync; each Rank is used by one thread.
unsafe impl Send for Rank {}

/// Runs `body` on `nranks` threads, each a connected rank with an RMA context.
fn with_ranks(nranks: usize, body: impl Fn(&Rank, &Barrier) + Send + Sync) {
    let p = plugin();
    let handles: Vec<[u8; 128]> = (0..nranks)
        .map(|_| {
            let mut instance = null_mut();
            // SAFETY: a pointer to a live local; no logger.
            assert_eq!(unsafe { p.init.unwrap()(&mut instance, 42, None) }, ffi::SUCCESS);
            let mut handle = [0u8; 128];
            let mut listen = null_mut();
            // SAFETY: a 128-byte handle buffer and a pointer to a live local.
            let listened = unsafe { p.listen.unwrap()(instance, 0, handle.as_mut_ptr().cast(), &mut listen) };
            assert_eq!(listened, ffi::SUCCESS);
            // SAFETY: the listen object listen returned, once.
            assert_eq!(unsafe { p.close_listen.unwrap()(listen) }, ffi::SUCCESS);
            // SAFETY: the instance init returned, once.
            assert_eq!(unsafe { p.finalize.unwrap()(instance) }, ffi::SUCCESS);
            handle
        })
        .collect();
    let barrier = Barrier::new(nranks);
    let handles = Arc::new(handles);
    std::thread::scope(|scope| {
        for rank in 0..nranks {
            let (handles, barrier, body) = (Arc::clone(&handles), &barrier, &body);
            scope.spawn(move || {
                let mut copies = (*handles).clone();
                let mut pointers: Vec<*mut c_void> = copies.iter_mut().map(|h| h.as_mut_ptr().cast()).collect();
                let mut instance = null_mut();
                // SAFETY: a pointer to a live local.
                assert_eq!(unsafe { p.init.unwrap()(&mut instance, 42, None) }, ffi::SUCCESS);
                let mut connection = null_mut();
                // SAFETY: nranks pointers to 128-byte handles, a pointer to a live local.
                let connected = unsafe {
                    p.connect.unwrap()(
                        instance,
                        pointers.as_mut_ptr(),
                        nranks as c_int,
                        rank as c_int,
                        null_mut(),
                        &mut connection,
                    )
                };
                assert_eq!(connected, ffi::SUCCESS);
                let mut config = RmaConfig { n_contexts: 1, traffic_class: -1, rank_stride: 1 };
                let mut context = null_mut();
                // SAFETY: the connection connect returned, a live config, a pointer to a live local.
                assert_eq!(unsafe { p.create_context.unwrap()(connection, &mut config, &mut context) }, ffi::SUCCESS);
                body(&Rank { rank, instance, connection, context }, barrier);
                // SAFETY: the objects the calls above returned, each freed once.
                unsafe {
                    assert_eq!(p.destroy_context.unwrap()(context), ffi::SUCCESS);
                    assert_eq!(p.close_coll.unwrap()(connection), ffi::SUCCESS);
                    assert_eq!(p.finalize.unwrap()(instance), ffi::SUCCESS);
                }
            });
        }
    });
}

impl Rank {
    /// Registers `memory` (collective: every rank calls it in the same order).
    fn register<T>(&self, memory: &mut [T], kind: c_int) -> *mut c_void {
        let mut handle = null_mut();
        // SAFETY: the connection is live; the memory outlives the registration (deregistered before it is freed).
        let result = unsafe {
            plugin().reg_mr_sym.unwrap()(
                self.connection,
                memory.as_mut_ptr().cast(),
                std::mem::size_of_val(memory),
                kind,
                0,
                &mut handle,
            )
        };
        assert_eq!(result, ffi::SUCCESS);
        handle
    }

    fn deregister(&self, handle: *mut c_void) {
        // SAFETY: a registration register returned, once.
        assert_eq!(unsafe { plugin().dereg_mr_sym.unwrap()(self.connection, handle) }, ffi::SUCCESS);
    }

    /// Tests `request` until it is done.
    fn wait(&self, request: *mut c_void) {
        let mut done = 0;
        while done == 0 {
            // SAFETY: a request an operation returned, not yet reported done.
            assert_eq!(unsafe { plugin().test.unwrap()(self.connection, request, &mut done) }, ffi::SUCCESS);
        }
    }
}

#[test]
fn a_put_lands_in_the_next_ranks_registration() {
    const N: usize = 4;
    const LEN: usize = 256;
    with_ranks(N, |me, barrier| {
        let mut data: Vec<u32> = (0..LEN as u32).map(|i| me.rank as u32 * 1000 + i).collect();
        let mut inbox = vec![0u32; LEN];
        let data_handle = me.register(&mut data, ffi::PTR_CUDA);
        let inbox_handle = me.register(&mut inbox, ffi::PTR_CUDA);
        let next = ((me.rank + 1) % N) as u32;
        let mut request = null_mut();
        // Elements 16..48 of this rank's data into elements 100..132 of the next rank's inbox.
        // SAFETY: the context and registrations are live; a pointer to a live local.
        let put = unsafe {
            plugin().iput.unwrap()(me.context, 0, 64, data_handle, 128, 400, inbox_handle, next, &mut request)
        };
        assert_eq!(put, ffi::SUCCESS);
        me.wait(request);
        barrier.wait();
        let from = ((me.rank + N - 1) % N) as u32;
        for (i, value) in inbox.iter().enumerate() {
            let expected = if (100..132).contains(&i) { from * 1000 + (i as u32 - 84) } else { 0 };
            assert_eq!(*value, expected, "rank {} inbox[{i}]", me.rank);
        }
        barrier.wait();
        me.deregister(inbox_handle);
        me.deregister(data_handle);
    });
}

#[test]
fn signals_are_exact_under_concurrent_puts_from_every_rank() {
    const N: usize = 8;
    const PUTS: u64 = 500;
    with_ranks(N, |me, barrier| {
        let mut payload = [me.rank as u64; 4];
        let mut landing = [0u64; 4 * N];
        let mut signals = [0u64; 2];
        let payload_handle = me.register(&mut payload, ffi::PTR_CUDA);
        let landing_handle = me.register(&mut landing, ffi::PTR_CUDA);
        let signal_handle = me.register(&mut signals, ffi::PTR_CUDA);
        barrier.wait();
        for i in 0..PUTS {
            let (op, value) = if i % 2 == 0 { (ffi::SIGNAL_OP_INC, 99) } else { (ffi::SIGNAL_OP_ADD, 3) };
            let mut request = null_mut();
            // Every rank puts its payload into its own slot of rank 0's landing area and adds to rank 0's word 1.
            // SAFETY: the context and registrations are live; a pointer to a live local.
            let put = unsafe {
                plugin().iput_signal.unwrap()(
                    me.context,
                    0,
                    0,
                    payload_handle,
                    32,
                    me.rank as u64 * 32,
                    landing_handle,
                    0,
                    8,
                    signal_handle,
                    value,
                    op,
                    true,
                    &mut request,
                )
            };
            assert_eq!(put, ffi::SUCCESS);
            me.wait(request);
        }
        barrier.wait();
        if me.rank == 0 {
            assert_eq!(signals, [0, N as u64 * (PUTS / 2) * (1 + 3)]);
            for (slot, chunk) in landing.chunks(4).enumerate() {
                assert_eq!(chunk, [slot as u64; 4]);
            }
        }
        barrier.wait();
        for handle in [signal_handle, landing_handle, payload_handle] {
            me.deregister(handle);
        }
    });
}

#[test]
fn accesses_past_a_registration_are_refused_and_nothing_is_written() {
    with_ranks(2, |me, barrier| {
        let mut data = [5u8; 64];
        let mut small = [0u8; 32];
        let data_handle = me.register(&mut data, ffi::PTR_CUDA);
        let small_handle = me.register(&mut small, ffi::PTR_CUDA);
        let mut request = null_mut();
        let p = plugin();
        // SAFETY: (all calls below) live context and registrations, a pointer to a live local.
        unsafe {
            // 16 bytes at offset 24 of the peer's 32: past its end.
            assert_eq!(
                p.iput.unwrap()(me.context, 0, 0, data_handle, 16, 24, small_handle, 1 - me.rank as u32, &mut request),
                ffi::INVALID_ARGUMENT
            );
            // An offset that wraps around.
            assert_eq!(
                p.iput.unwrap()(me.context, 0, u64::MAX - 3, data_handle, 8, 0, small_handle, 0, &mut request),
                ffi::INVALID_ARGUMENT
            );
            // A rank outside the connection.
            assert_eq!(
                p.iput.unwrap()(me.context, 0, 0, data_handle, 8, 0, small_handle, 2, &mut request),
                ffi::INVALID_ARGUMENT
            );
            // A signal word that is not 8-byte aligned, or past the end.
            assert_eq!(
                p.iput_signal.unwrap()(
                    me.context,
                    0,
                    0,
                    null_mut(),
                    0,
                    0,
                    null_mut(),
                    0,
                    4,
                    small_handle,
                    1,
                    ffi::SIGNAL_OP_INC,
                    true,
                    &mut request
                ),
                ffi::INVALID_ARGUMENT
            );
            assert_eq!(
                p.iput_signal.unwrap()(
                    me.context,
                    0,
                    0,
                    null_mut(),
                    0,
                    0,
                    null_mut(),
                    0,
                    32,
                    small_handle,
                    1,
                    ffi::SIGNAL_OP_INC,
                    true,
                    &mut request
                ),
                ffi::INVALID_ARGUMENT
            );
            // An unknown signal operation.
            assert_eq!(
                p.iput_signal.unwrap()(
                    me.context,
                    0,
                    0,
                    null_mut(),
                    0,
                    0,
                    null_mut(),
                    0,
                    0,
                    small_handle,
                    1,
                    0x8,
                    true,
                    &mut request
                ),
                ffi::INVALID_ARGUMENT
            );
            let mut failed = false;
            assert_eq!(p.query_last_error.unwrap()(me.context, &mut failed), ffi::SUCCESS);
            assert!(failed, "a refused operation is reported by queryLastError");
        }
        barrier.wait();
        assert_eq!(small, [0u8; 32], "rank {}: a refused put wrote", me.rank);
        barrier.wait();
        me.deregister(small_handle);
        me.deregister(data_handle);
    });
}

#[test]
fn a_get_reads_the_peers_registration_and_a_flush_completes() {
    with_ranks(2, |me, barrier| {
        let mut mine = [me.rank as u16 + 7; 16];
        let mut fetched = [0u16; 16];
        let mine_handle = me.register(&mut mine, ffi::PTR_CUDA);
        let fetched_handle = me.register(&mut fetched, ffi::PTR_HOST);
        barrier.wait();
        let peer = 1 - me.rank as u32;
        let (mut get, mut flush) = (null_mut(), null_mut());
        // SAFETY: live context and registrations; pointers to live locals.
        unsafe {
            assert_eq!(
                plugin().iget.unwrap()(me.context, 0, 4, mine_handle, 8, 0, fetched_handle, peer, &mut get),
                ffi::SUCCESS
            );
            assert_eq!(plugin().iflush.unwrap()(me.context, 0, mine_handle, peer, &mut flush), ffi::SUCCESS);
        }
        me.wait(get);
        me.wait(flush);
        assert_eq!(fetched[..4], [peer as u16 + 7; 4]);
        assert_eq!(fetched[4..], [0; 12]);
        barrier.wait();
        me.deregister(fetched_handle);
        me.deregister(mine_handle);
    });
}

#[test]
fn a_bad_rank_stride_and_dma_buf_registrations_are_refused() {
    with_ranks(2, |me, _| {
        let mut config = RmaConfig { n_contexts: 1, traffic_class: -1, rank_stride: 3 };
        let mut context = null_mut();
        // SAFETY: a live connection and config, a pointer to a live local.
        let created = unsafe { plugin().create_context.unwrap()(me.connection, &mut config, &mut context) };
        assert_eq!(created, ffi::INVALID_ARGUMENT);
        let mut handle = null_mut();
        // SAFETY: the call refuses before reading anything.
        let dma_buf = unsafe {
            plugin().reg_mr_sym_dma_buf.unwrap()(me.connection, null_mut(), 8, ffi::PTR_CUDA, 0, 3, 0, &mut handle)
        };
        assert_eq!(dma_buf, ffi::INVALID_USAGE);
        let _ = me.instance;
    });
}

/// The CUDA engine: copies on a GPU, and exact signal additions when every rank adds to one word at once.
#[test]
#[ignore = "needs a CUDA GPU"]
fn the_cuda_engine_copies_and_adds_exactly_on_a_gpu() {
    use crate::cuda::CudaEngine;
    use crate::engine::Engine;
    use cudarc::driver::{CudaContext, DevicePtr};

    const ENGINES: usize = 8;
    const ADDS: u64 = 200;
    let context = CudaContext::new(0).expect("a CUDA device");
    let stream = context.default_stream();
    let word = stream.alloc_zeros::<u64>(1).unwrap();
    let source = stream.clone_htod(&(0..1024u32).collect::<Vec<_>>()).unwrap();
    let mut destination = stream.alloc_zeros::<u32>(1024).unwrap();
    stream.synchronize().unwrap();
    let (word_address, _w) = word.device_ptr(&stream);
    let (source_address, _s) = source.device_ptr(&stream);
    let (destination_address, _d) = {
        use cudarc::driver::DevicePtrMut;
        destination.device_ptr_mut(&stream)
    };
    std::thread::scope(|scope| {
        for e in 0..ENGINES {
            let context = Arc::clone(&context);
            scope.spawn(move || {
                context.bind_to_thread().unwrap();
                let engine = CudaEngine::on_current_context().unwrap();
                // Each engine copies its own 128 elements, then adds to the shared word.
                let (offset, bytes) = (e as u64 * 128 * 4, 128 * 4);
                engine.copy(destination_address + offset, source_address + offset, bytes, false).unwrap();
                let inline = [e as u32 + 5000];
                engine.copy(destination_address + offset, inline.as_ptr() as u64, 4, true).unwrap();
                for _ in 0..ADDS {
                    engine.add(word_address, e as u64 + 1).unwrap();
                }
                let marker = engine.mark().unwrap();
                engine.synchronize().unwrap();
                assert!(engine.is_done(marker).unwrap());
                engine.release(marker);
            });
        }
    });
    drop((_w, _s, _d));
    let sum = stream.clone_dtoh(&word).unwrap();
    assert_eq!(sum[0], ADDS * (ENGINES as u64 * (ENGINES as u64 + 1) / 2));
    let copied = stream.clone_dtoh(&destination).unwrap();
    for (i, value) in copied.iter().enumerate() {
        let expected = if i % 128 == 0 { i as u32 / 128 + 5000 } else { i as u32 };
        assert_eq!(*value, expected, "element {i}");
    }
}
