//! The entry points NCCL calls, each a thin shell: read the C arguments, run the Rust body, turn its error into a
//! logged warning and a result code, and never let a panic cross into NCCL.

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::engine::{Engine, Marker};
use crate::error::{Error, Result};
use crate::ffi::{self, NcclResult, NetProperties, RmaConfig, RmaV14};
use crate::group::{self, Group, Handle, Part, Region, PEER_DEADLINE};
use crate::log;

/// The table NCCL looks up in this library (`NCCL_RMA_PLUGIN=/path/libweft_gin_loopback.so`).
#[allow(non_upper_case_globals)]
#[no_mangle]
pub static ncclRmaPlugin_v14: RmaV14 = RmaV14 {
    name: c"weft-loopback".as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    create_context: Some(create_context),
    reg_mr_sym: Some(reg_mr_sym),
    reg_mr_sym_dma_buf: Some(reg_mr_sym_dma_buf),
    dereg_mr_sym: Some(dereg_mr_sym),
    destroy_context: Some(destroy_context),
    close_coll: Some(close_coll),
    close_listen: Some(close_listen),
    iput: Some(iput),
    iput_signal: Some(iput_signal),
    iget: Some(iget),
    iflush: Some(iflush),
    test: Some(test),
    rma_progress: None,
    query_last_error: Some(query_last_error),
    finalize: Some(finalize),
};

/// Runs `body`, turning an error into a warning through NCCL's logger and a result code, and a panic into
/// `ncclInternalError`.
fn guard(call: &str, body: impl FnOnce() -> Result<()>) -> NcclResult {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ffi::SUCCESS,
        Ok(Err(error)) => {
            log::warn(&format!("{call}: {error}"));
            error.code
        }
        Err(_) => {
            log::warn(&format!("{call}: panicked (a bug in weft's loopback backend)"));
            ffi::INTERNAL_ERROR
        }
    }
}

/// Reads a non-null argument NCCL passes by pointer.
fn non_null<T>(call: &str, pointer: *mut T) -> Result<*mut T> {
    if pointer.is_null() {
        Err(Error::argument(format!("{call}: NULL pointer argument")))
    } else {
        Ok(pointer)
    }
}

/// What `init` returns: nothing this backend needs per communicator but the logger, which is process-wide.
struct Instance;

/// What `listen` returns: this rank's handle, already written into NCCL's buffer.
struct Listen;

/// What `connect` returns: this rank in its group.
struct Connection {
    group: Arc<Group>,
    rank: usize,
    registrations: AtomicU64,
}

/// What `createContext` returns.
struct Context {
    rank: usize,
    engine: Arc<dyn Engine>,
    failed: AtomicBool,
}

/// What `iput`, `iputSignal`, `iget` and `iflush` return; freed by the `test` that finds it done.
struct Request {
    marker: Marker,
    engine: Arc<dyn Engine>,
}

fn new_engine() -> Result<Arc<dyn Engine>> {
    #[cfg(test)]
    {
        Ok(Arc::new(crate::host_engine::HostEngine))
    }
    #[cfg(not(test))]
    {
        Ok(Arc::new(crate::cuda::CudaEngine::on_current_context()?))
    }
}

unsafe extern "C" fn init(ctx: *mut *mut c_void, _comm_id: u64, logger: ffi::DebugLogger) -> NcclResult {
    guard("init", || {
        log::set(logger);
        let ctx = non_null("init", ctx)?;
        // SAFETY: NCCL passes a pointer to where it keeps this backend's instance.
        unsafe { *ctx = Box::into_raw(Box::new(Instance)).cast() };
        Ok(())
    })
}

unsafe extern "C" fn devices(ndev: *mut c_int) -> NcclResult {
    guard("devices", || {
        // SAFETY: NCCL passes a pointer to one int.
        unsafe { *non_null("devices", ndev)? = 1 };
        Ok(())
    })
}

unsafe extern "C" fn get_properties(dev: c_int, props: *mut NetProperties) -> NcclResult {
    guard("getProperties", || {
        if dev != 0 {
            return Err(Error::argument(format!("device {dev}: the loopback backend has one device, 0")));
        }
        let props = non_null("getProperties", props)?;
        let properties = NetProperties {
            name: c"weft-loopback".as_ptr().cast_mut(),
            pci_path: c"/sys/devices/virtual/weft-loopback".as_ptr().cast_mut(),
            guid: 0x7765_6674_6c6f_6f70,
            ptr_support: ffi::PTR_HOST | ffi::PTR_CUDA,
            reg_is_global: 0,
            force_flush: 0,
            speed: 400_000,
            port: 1,
            latency: 0.0,
            max_comms: 65536,
            // The proxy's queue holds 32 × maxRecvs descriptors per target rank.
            max_recvs: 8,
            net_device_type: ffi::NET_DEVICE_GIN_PROXY,
            net_device_version: 0,
            v_props: ffi::VirtualDeviceProperties { ndevs: 1, devs: [0; 8] },
            max_p2p_bytes: 1 << 40,
            max_coll_bytes: 1 << 40,
            max_multi_request_size: 1,
            rail_id: 0,
            plane_id: 0,
        };
        // SAFETY: NCCL passes a pointer to one ncclNetProperties_v12_t, whose layout NetProperties has.
        unsafe { props.write(properties) };
        Ok(())
    })
}

unsafe extern "C" fn listen(
    _ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> NcclResult {
    guard("listen", || {
        if dev != 0 {
            return Err(Error::argument(format!("device {dev}: the loopback backend has one device, 0")));
        }
        let bytes = Handle::new().to_bytes();
        let handle = non_null("listen", handle)?;
        // SAFETY: NCCL's handle buffer holds NCCL_NET_HANDLE_MAXSIZE (128) bytes, more than a handle's.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), handle.cast::<u8>(), bytes.len()) };
        // SAFETY: NCCL passes a pointer to where it keeps the listen object.
        unsafe { *non_null("listen", listen_comm)? = Box::into_raw(Box::new(Listen)).cast() };
        Ok(())
    })
}

unsafe extern "C" fn connect(
    _ctx: *mut c_void,
    handles: *mut *mut c_void,
    nranks: c_int,
    rank: c_int,
    _listen_comm: *mut c_void,
    coll_comm: *mut *mut c_void,
) -> NcclResult {
    guard("connect", || {
        let handles = non_null("connect", handles)?;
        let (nranks, rank) = match (usize::try_from(nranks), usize::try_from(rank)) {
            (Ok(n), Ok(r)) if n > 0 => (n, r),
            _ => return Err(Error::argument(format!("rank {rank} of {nranks} ranks"))),
        };
        let mut all = Vec::with_capacity(nranks);
        for peer in 0..nranks {
            // SAFETY: NCCL passes nranks pointers, each to a NCCL_NET_HANDLE_MAXSIZE-byte handle a rank's listen
            // wrote (or another backend's, which from_bytes tells apart by its first 8 bytes).
            let bytes = unsafe { *handles.add(peer) };
            let bytes = non_null("connect", bytes)?;
            let mut copy = [0u8; group::HANDLE_BYTES];
            // SAFETY: see above: at least HANDLE_BYTES readable bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.cast::<u8>(), copy.as_mut_ptr(), copy.len()) };
            all.push(copy);
        }
        let group = group::join(&all, rank)?;
        log::info(&format!("rank {rank} of {nranks} connected (threads of process {})", std::process::id()));
        let connection = Connection { group, rank, registrations: AtomicU64::new(0) };
        // SAFETY: NCCL passes a pointer to where it keeps the connection.
        unsafe { *non_null("connect", coll_comm)? = Box::into_raw(Box::new(connection)).cast() };
        Ok(())
    })
}

/// The connection behind NCCL's `collComm`.
///
/// # Safety
/// `coll_comm` is a value `connect` returned and `closeColl` has not freed.
unsafe fn connection<'a>(call: &str, coll_comm: *mut c_void) -> Result<&'a Connection> {
    // SAFETY: the caller's contract.
    Ok(unsafe { &*non_null(call, coll_comm)?.cast::<Connection>() })
}

unsafe extern "C" fn create_context(
    coll_comm: *mut c_void,
    config: *mut RmaConfig,
    rma_ctx: *mut *mut c_void,
) -> NcclResult {
    guard("createContext", || {
        // SAFETY: NCCL passes the connection it got from connect.
        let connection = unsafe { connection("createContext", coll_comm)? };
        // SAFETY: NCCL passes a pointer to one ncclRmaConfig_v14_t.
        let config = unsafe { *non_null("createContext", config)? };
        let nranks = connection.group.nranks as c_int;
        if config.n_contexts < 1 {
            return Err(Error::argument(format!("{} contexts", config.n_contexts)));
        }
        if config.rank_stride <= 0 || nranks % config.rank_stride != 0 {
            return Err(Error::argument(format!(
                "rank stride {}: it must be positive and divide the {nranks} ranks",
                config.rank_stride
            )));
        }
        let context = Context { rank: connection.rank, engine: new_engine()?, failed: AtomicBool::new(false) };
        // SAFETY: NCCL passes a pointer to where it keeps the context.
        unsafe { *non_null("createContext", rma_ctx)? = Box::into_raw(Box::new(context)).cast() };
        Ok(())
    })
}

unsafe extern "C" fn reg_mr_sym(
    coll_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    kind: c_int,
    _mr_flags: u64,
    mhandle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSym", || {
        // SAFETY: NCCL passes the connection it got from connect.
        let connection = unsafe { connection("regMrSym", coll_comm)? };
        group::check_kind(kind)?;
        let sequence = connection.registrations.fetch_add(1, Ordering::Relaxed);
        let part = Part { base: data as u64, len: size, kind };
        let parts = connection.group.register(sequence, connection.rank, part, PEER_DEADLINE)?;
        let region = Region { parts, rank: connection.rank };
        // SAFETY: NCCL passes a pointer to where it keeps the registration.
        unsafe { *non_null("regMrSym", mhandle)? = Box::into_raw(Box::new(region)).cast() };
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn reg_mr_sym_dma_buf(
    _coll_comm: *mut c_void,
    _data: *mut c_void,
    _size: usize,
    _kind: c_int,
    _offset: u64,
    _fd: c_int,
    _mr_flags: u64,
    _mhandle: *mut *mut c_void,
) -> NcclResult {
    guard("regMrSymDmaBuf", || {
        Err(Error::usage(
            "the loopback backend registers memory by address, not by DMA-BUF (it reports no NCCL_PTR_DMABUF)",
        ))
    })
}

unsafe extern "C" fn dereg_mr_sym(_coll_comm: *mut c_void, mhandle: *mut c_void) -> NcclResult {
    guard("deregMrSym", || {
        // SAFETY: NCCL passes a registration regMrSym returned, once.
        drop(unsafe { Box::from_raw(non_null("deregMrSym", mhandle)?.cast::<Region>()) });
        Ok(())
    })
}

unsafe extern "C" fn destroy_context(rma_ctx: *mut c_void) -> NcclResult {
    guard("destroyContext", || {
        if rma_ctx.is_null() {
            return Ok(());
        }
        // SAFETY: NCCL passes a context createContext returned, once.
        let context = unsafe { Box::from_raw(rma_ctx.cast::<Context>()) };
        // NCCL frees the memory behind the registrations next: nothing of this context may still copy into it.
        context.engine.synchronize()
    })
}

unsafe extern "C" fn close_coll(coll_comm: *mut c_void) -> NcclResult {
    guard("closeColl", || {
        if !coll_comm.is_null() {
            // SAFETY: NCCL passes a connection connect returned, once.
            drop(unsafe { Box::from_raw(coll_comm.cast::<Connection>()) });
        }
        Ok(())
    })
}

unsafe extern "C" fn close_listen(listen_comm: *mut c_void) -> NcclResult {
    guard("closeListen", || {
        if !listen_comm.is_null() {
            // SAFETY: NCCL passes a listen object listen returned, once.
            drop(unsafe { Box::from_raw(listen_comm.cast::<Listen>()) });
        }
        Ok(())
    })
}

/// The context behind NCCL's `rmaCtx`.
///
/// # Safety
/// `rma_ctx` is a value `createContext` returned and `destroyContext` has not freed.
unsafe fn context<'a>(call: &str, rma_ctx: *mut c_void) -> Result<&'a Context> {
    // SAFETY: the caller's contract.
    Ok(unsafe { &*non_null(call, rma_ctx)?.cast::<Context>() })
}

/// The registration behind an mhandle.
///
/// # Safety
/// `mhandle` is a value `regMrSym` returned and `deregMrSym` has not freed.
unsafe fn region<'a>(call: &str, mhandle: *mut c_void) -> Result<&'a Region> {
    // SAFETY: the caller's contract.
    Ok(unsafe { &*non_null(call, mhandle)?.cast::<Region>() })
}

impl Context {
    /// Runs an operation's body; on error remembers it for `queryLastError`. On success hands NCCL a request that
    /// completes after everything the body enqueued.
    fn submit(&self, request: *mut *mut c_void, body: impl FnOnce(&dyn Engine) -> Result<()>) -> Result<()> {
        let request = non_null("request", request)?;
        let result = body(&*self.engine).and_then(|()| self.engine.mark());
        match result {
            Ok(marker) => {
                let boxed = Box::new(Request { marker, engine: Arc::clone(&self.engine) });
                // SAFETY: NCCL passes a pointer to where it keeps the request.
                unsafe { *request = Box::into_raw(boxed).cast() };
                Ok(())
            }
            Err(error) => {
                self.failed.store(true, Ordering::Release);
                Err(error)
            }
        }
    }

    /// Copies `size` bytes at `source_offset` of this rank's part of `source` to `destination_offset` of rank
    /// `target`'s part of `destination`.
    fn put(
        &self,
        engine: &dyn Engine,
        source: (&Region, u64),
        destination: (&Region, usize, u64),
        size: usize,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let from = source.0.address(self.rank, source.1, size)?;
        let to = destination.0.address(destination.1, destination.2, size)?;
        engine.copy(to, from, size, source.0.own().kind == ffi::PTR_HOST)
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput(
    rma_ctx: *mut c_void,
    _context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iput", || {
        // SAFETY: NCCL passes a live context and registrations of it (the proxy takes them from its descriptors).
        let (context, source, destination) =
            unsafe { (context("iput", rma_ctx)?, region("iput", src_mhandle)?, region("iput", dst_mhandle)?) };
        context.submit(request, |engine| {
            context.put(engine, (source, src_off), (destination, rank as usize, dst_off), size)
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iput_signal(
    rma_ctx: *mut c_void,
    _context: c_int,
    src_off: u64,
    src_mhandle: *mut c_void,
    size: usize,
    dst_off: u64,
    dst_mhandle: *mut c_void,
    rank: u32,
    signal_off: u64,
    signal_mhandle: *mut c_void,
    signal_value: u64,
    signal_op: u32,
    _is_strong_signal: bool,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iputSignal", || {
        // SAFETY: NCCL passes a live context and registrations of it; a signal alone (a VA signal) comes with a
        // NULL source and destination and size 0.
        let (context, signal) = unsafe { (context("iputSignal", rma_ctx)?, region("iputSignal", signal_mhandle)?) };
        let data = if size > 0 {
            // SAFETY: as above.
            Some(unsafe { (region("iputSignal", src_mhandle)?, region("iputSignal", dst_mhandle)?) })
        } else {
            None
        };
        let value = match signal_op {
            ffi::SIGNAL_OP_INC => 1,
            ffi::SIGNAL_OP_ADD => signal_value,
            other => return Err(Error::argument(format!("signal operation {other:#x} (neither INC nor ADD)"))),
        };
        let target = rank as usize;
        if signal_off % 8 != 0 {
            return Err(Error::argument(format!("signal offset {signal_off} is not 8-byte aligned")));
        }
        let word = signal.address(target, signal_off, 8)?;
        context.submit(request, |engine| {
            if let Some((source, destination)) = data {
                context.put(engine, (source, src_off), (destination, target, dst_off), size)?;
            }
            // Strong by construction: the addition is queued after the data.
            engine.add(word, value)
        })
    })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn iget(
    rma_ctx: *mut c_void,
    _context: c_int,
    remote_off: u64,
    remote_mhandle: *mut c_void,
    size: usize,
    local_off: u64,
    local_mhandle: *mut c_void,
    rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iget", || {
        // SAFETY: NCCL passes a live context and registrations of it.
        let (context, remote, local) =
            unsafe { (context("iget", rma_ctx)?, region("iget", remote_mhandle)?, region("iget", local_mhandle)?) };
        context.submit(request, |engine| {
            if size == 0 {
                return Ok(());
            }
            let from = remote.address(rank as usize, remote_off, size)?;
            let to = local.address(context.rank, local_off, size)?;
            engine.copy(to, from, size, remote.parts[rank as usize].kind == ffi::PTR_HOST)
        })
    })
}

unsafe extern "C" fn iflush(
    rma_ctx: *mut c_void,
    _context: c_int,
    _mhandle: *mut c_void,
    _rank: u32,
    request: *mut *mut c_void,
) -> NcclResult {
    guard("iflush", || {
        // SAFETY: NCCL passes a live context.
        let context = unsafe { context("iflush", rma_ctx)? };
        // Everything earlier on this context's queue is visible once the request completes.
        context.submit(request, |_| Ok(()))
    })
}

unsafe extern "C" fn test(_coll_comm: *mut c_void, request: *mut c_void, done: *mut c_int) -> NcclResult {
    guard("test", || {
        let request = non_null("test", request)?.cast::<Request>();
        let done = non_null("test", done)?;
        // SAFETY: NCCL passes a request one of the operations returned and tests it until it reports done, never
        // after.
        let finished = unsafe { (*request).engine.is_done((*request).marker)? };
        if finished {
            // SAFETY: see above: this is the last time NCCL hands this request over.
            let request = unsafe { Box::from_raw(request) };
            request.engine.release(request.marker);
        }
        // SAFETY: NCCL passes a pointer to one int.
        unsafe { *done = c_int::from(finished) };
        Ok(())
    })
}

unsafe extern "C" fn query_last_error(rma_ctx: *mut c_void, has_error: *mut bool) -> NcclResult {
    guard("queryLastError", || {
        // SAFETY: NCCL passes a live context.
        let context = unsafe { context("queryLastError", rma_ctx)? };
        // SAFETY: NCCL passes a pointer to one bool.
        unsafe { *non_null("queryLastError", has_error)? = context.failed.load(Ordering::Acquire) };
        Ok(())
    })
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> NcclResult {
    guard("finalize", || {
        if !ctx.is_null() {
            // SAFETY: NCCL passes the instance init returned, once.
            drop(unsafe { Box::from_raw(ctx.cast::<Instance>()) });
        }
        Ok(())
    })
}
