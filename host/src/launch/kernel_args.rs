//! What `#[weft::kernel]`-generated launchers call: typed argument pushing with the run-time checks types
//! cannot make (buffers and device communicator on the stream's device, resources for the grid), then
//! compile-or-load and launch.
//!
//! Pushing is safe; launching is `unsafe` ([`KernelArgs::launch`]): the arguments say nothing about what the
//! kernel's C++ does with them. Generated launchers call it inside the macro's expansion, where the macro vouches
//! for the source (it wrote it) and for the accesses (it proved them, checks them at launch, or has them checked on
//! the device); code outside weft needs an `unsafe` block, which `#![forbid(unsafe_code)]` refuses.

use std::sync::Arc;

use cudarc::driver::CudaStream;
use weft_device::caps::CapabilitySet;

use super::buffers::{KernelSlice, KernelSliceMut, KernelWindow};
use super::params::{self, ParamSlot};
use super::{launch_raw, ArgBuffer, LaunchConfig, SliceArg};
use crate::comm::Mode;
use crate::devcomm::{DevComm, Requirements};
use crate::error::{Error, Result};
use crate::jit::{ArgAlignment, BoundsChecks};

/// The arguments of one kernel launch, in parameter order, with the checks a generated launcher needs.
pub struct KernelArgs<'a> {
    kernel: &'static str,
    stream: &'a Arc<CudaStream>,
    args: ArgBuffer<'a>,
    /// The kernel's parameters, in order (for errors; empty if not given).
    parameters: &'static [&'static str],
    /// Whether every slice and window pushed so far starts on a 16-byte boundary: picks the compiled form.
    alignment: ArgAlignment,
    /// Ranks sharing the GPU of the device communicator pushed, if any (1 otherwise).
    ranks_on_gpu: usize,
    /// The stream the resources are noted as used on: `stream`, or, when recording into a CUDA graph, the stream
    /// its replays run on (what freeing a resource waits for).
    uses: &'a Arc<CudaStream>,
    /// The count of operations of the capture this launch is recorded into, if it is.
    capture: Option<&'a crate::graph::CaptureLog>,
    /// The device communicator pushed ([`DevComm::identity`]), and the one an LL all-to-all handle pushed belongs
    /// to: a handle must come from the launch's own device communicator.
    dev_identity: Option<usize>,
    ll_a2a_owner: Option<usize>,
    /// The device memory each argument reaches on this rank, to refuse a launch where one that may be written
    /// overlaps another.
    footprint: Footprint,
    /// The NCCL communicator of the first device communicator or window pushed: every other one must be of the
    /// same ([`Error::MixedCommunicators`]).
    communicator: OneCommunicator,
}

/// The byte ranges of a launch's buffer and window arguments, and whether the kernel may write each: in a fixed
/// array (no allocation for kernels of up to [`Footprint::INLINE`] such arguments).
#[derive(Debug, Clone)]
struct Footprint {
    inline: [Reach; Footprint::INLINE],
    count: usize,
    more: Vec<Reach>,
    /// Whether an argument that may be written was pushed through a shared borrow (a window, or any buffer of a
    /// recorded launch): only then can two arguments overlap harmfully, since `&mut` arguments are exclusive.
    shared_write: bool,
}

#[derive(Debug, Clone, Copy)]
struct Reach {
    start: u64,
    end: u64,
    write: bool,
    parameter: &'static str,
}

impl Footprint {
    const INLINE: usize = 8;

    fn new() -> Footprint {
        let empty = Reach { start: 0, end: 0, write: false, parameter: "" };
        Footprint { inline: [empty; Footprint::INLINE], count: 0, more: Vec::new(), shared_write: false }
    }

    fn add(&mut self, parameter: &'static str, start: u64, bytes: usize, write: bool, shared: bool) {
        self.shared_write |= write && shared;
        if bytes == 0 {
            return;
        }
        let reach = Reach { start, end: start.saturating_add(bytes as u64), write, parameter };
        match self.inline.get_mut(self.count) {
            Some(slot) => *slot = reach,
            None => self.more.push(reach),
        }
        self.count += 1;
    }

    /// Two arguments of which one may be written that reach the same bytes.
    fn overlap(&self) -> Option<(&'static str, &'static str)> {
        if !self.shared_write {
            return None;
        }
        let all: Vec<&Reach> = self.inline[..self.count.min(Footprint::INLINE)].iter().chain(&self.more).collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                if (a.write || b.write) && a.start < b.end && b.start < a.end {
                    return Some((a.parameter, b.parameter));
                }
            }
        }
        None
    }
}

/// The NCCL communicator a launch's device communicator and windows belong to: the first one pushed sets it, with
/// its parameter's name.
#[derive(Debug, Default, Clone, Copy)]
struct OneCommunicator(Option<(usize, &'static str)>);

impl OneCommunicator {
    /// Requires `parameter`'s communicator, `handle`, to be the launch's: a kernel indexes every window's peers by the
    /// device communicator's teams (by the first window's LSA team without one), which mean other ranks, or more of
    /// them, in another communicator — a split or shrunk child and its parent included.
    fn require(&mut self, kernel: &'static str, parameter: &'static str, handle: usize) -> Result<()> {
        match self.0 {
            None => {
                self.0 = Some((handle, parameter));
                Ok(())
            }
            Some((first_handle, _)) if first_handle == handle => Ok(()),
            Some((_, first)) => Err(Error::MixedCommunicators { kernel, parameter, first }),
        }
    }
}

impl std::fmt::Debug for KernelArgs<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelArgs")
            .field("kernel", &self.kernel)
            .field("parameters", &self.parameters)
            .field("args", &self.args)
            .finish()
    }
}

impl<'a> KernelArgs<'a> {
    /// Starts the argument list of `kernel`, to be launched on `stream`.
    pub fn new(kernel: &'static str, stream: &'a Arc<CudaStream>) -> KernelArgs<'a> {
        KernelArgs::with_parameters(kernel, &[], stream)
    }

    /// [`KernelArgs::new`] for a kernel whose parameters are named `parameters`, in order (errors name them).
    pub fn with_parameters(
        kernel: &'static str,
        parameters: &'static [&'static str],
        stream: &'a Arc<CudaStream>,
    ) -> KernelArgs<'a> {
        KernelArgs {
            kernel,
            stream,
            args: ArgBuffer::new(),
            parameters,
            alignment: ArgAlignment::Aligned16,
            ranks_on_gpu: 1,
            uses: stream,
            capture: None,
            dev_identity: None,
            ll_a2a_owner: None,
            footprint: Footprint::new(),
            communicator: OneCommunicator::default(),
        }
    }

    /// [`KernelArgs::with_parameters`] for a launch recorded into a CUDA graph: it is enqueued on the capture's
    /// private stream, and the resources pushed are noted as used by the graph's replays (what the generated
    /// `record` uses; [`crate::graph`] says why this is sound).
    pub fn for_capture(
        kernel: &'static str,
        parameters: &'static [&'static str],
        capture: &'a crate::graph::Capture<'_>,
    ) -> KernelArgs<'a> {
        KernelArgs {
            uses: capture.replay_stream(),
            capture: Some(capture.log()),
            ..KernelArgs::with_parameters(kernel, parameters, capture.capturing_stream())
        }
    }

    /// Refuses a launch with `cfg` of this kernel, which opens `gemm_tiles`, unless its blocks and shared memory are
    /// what the loop needs on the stream's GPU ([`super::check_gemm_tiles`]).
    pub fn check_gemm_tiles(&self, cfg: &LaunchConfig) -> Result<()> {
        super::check_gemm_tiles(self.kernel, cfg, self.stream)
    }

    /// Refuses an eager push into a launch recorded into a CUDA graph: its events and borrows would be the
    /// capture's, not the replays' (a recorded launch pushes with the `push_graph_*` forms).
    fn eager_only(&self, parameter: &'static str) -> Result<()> {
        if self.capture.is_some() {
            return Err(Error::invalid(
                parameter,
                format!("`{}` is recorded into a CUDA graph: its buffers are pushed as graph buffers", self.kernel),
            ));
        }
        Ok(())
    }

    fn wrong_device(&self, parameter: &'static str, device: usize) -> Error {
        Error::invalid(
            parameter,
            format!(
                "`{}` is launched on a stream of CUDA device {}, but `{parameter}` lives on device {device}: use a \
                 stream of the communicator's context",
                self.kernel,
                self.stream.context().ordinal()
            ),
        )
    }

    /// Requires the device communicator or window `parameter` to belong to NCCL communicator `handle`, the one of
    /// the first pushed ([`OneCommunicator::require`]).
    fn same_communicator(&mut self, parameter: &'static str, handle: usize) -> Result<()> {
        self.communicator.require(self.kernel, parameter, handle)
    }

    /// A `&DevComm<C>` parameter: NCCL's `ncclDevComm` bytes.
    pub fn push_dev_comm<C: CapabilitySet, M: Mode>(
        &mut self,
        parameter: &'static str,
        dev: &'a DevComm<'_, C, M>,
    ) -> Result<()> {
        if dev.cuda_device() != self.stream.context().ordinal() {
            return Err(self.wrong_device(parameter, dev.cuda_device()));
        }
        self.same_communicator(parameter, dev.communicator_handle())?;
        self.ranks_on_gpu = self.ranks_on_gpu.max(dev.communicator().ranks_on_gpu());
        if let Some(log) = self.capture {
            log.join_group_of(dev.communicator());
            log.watch(dev.communicator().close_watch());
        }
        self.args.push_bytes(dev.kernel_arg_bytes()?, DevComm::<C, M>::KERNEL_ARG_ALIGN)?;
        self.dev_identity = Some(dev.identity());
        dev.note_launch(self.uses);
        Ok(())
    }

    /// A `&Window<T>` parameter; returns the window's length (for the bounds checks).
    pub fn push_window<T>(&mut self, parameter: &'static str, window: &'a impl KernelWindow<T>) -> Result<usize> {
        let arg = self.window_arg(parameter, window)?;
        self.same_communicator(parameter, window.communicator_handle())?;
        if let Some(log) = self.capture {
            log.watch(window.close_watch());
        }
        self.alignment = self.alignment.and(arg.offset_bytes as u64);
        self.args.push(arg);
        // The kernel may store into the window's local part through a shared borrow.
        let (start, bytes) = window.local_range();
        self.footprint.add(parameter, start, bytes, true, true);
        self.use_window(window)?;
        Ok(arg.len)
    }

    /// Orders the launch after the conflicting uses of `window`'s local buffer (eagerly), or claims it for the
    /// graph's replays (recording).
    fn use_window<T>(&self, window: &(impl super::buffers::sealed::SymmetricWindow<T> + ?Sized)) -> Result<()> {
        match self.capture {
            Some(capture) => window.claim_for_graph(capture.token(), self.uses),
            None => window.begin_launch(self.stream),
        }
    }

    /// `window`'s argument, where it lives on the stream's device and is still registered.
    fn window_arg<T>(
        &self,
        parameter: &'static str,
        window: &(impl super::buffers::sealed::SymmetricWindow<T> + ?Sized),
    ) -> Result<super::WindowArg> {
        if window.cuda_device() != self.stream.context().ordinal() {
            return Err(self.wrong_device(parameter, window.cuda_device()));
        }
        window.window_arg()
    }

    /// A `&[T]` parameter; returns its length.
    pub fn push_slice<T>(&mut self, parameter: &'static str, buffer: &'a impl KernelSlice<T>) -> Result<usize> {
        self.eager_only(parameter)?;
        super::check_same_context(buffer.buffer_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
        let len = buffer.buffer_len();
        let (ptr, guard) = buffer.read_address(self.stream, Some(self.stream))?;
        self.args.keep(guard);
        self.footprint.add(parameter, ptr, len * std::mem::size_of::<T>(), false, true);
        self.push_slice_arg(SliceArg { ptr, len });
        Ok(len)
    }

    /// A `&mut [T]` parameter; returns its length.
    pub fn push_slice_mut<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a mut impl KernelSliceMut<T>,
    ) -> Result<usize> {
        self.eager_only(parameter)?;
        super::check_same_context(buffer.buffer_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
        let len = buffer.buffer_len();
        let (ptr, guard) = buffer.write_address(self.stream, Some(self.stream))?;
        self.args.keep(guard);
        self.footprint.add(parameter, ptr, len * std::mem::size_of::<T>(), true, false);
        self.push_slice_arg(SliceArg { ptr, len });
        Ok(len)
    }

    /// A `&[T]` parameter of a launch recorded into a CUDA graph (weft memory only: see
    /// [`crate::graph::GraphBuffer`]); returns its length. No event is recorded: the buffer is claimed for the
    /// graph's replays instead.
    pub fn push_graph_buffer<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a impl crate::graph::GraphBuffer<T>,
    ) -> Result<usize> {
        self.push_recorded(parameter, buffer, crate::resources::uses::Access::Read)
    }

    /// A `&mut [T]` parameter of a launch recorded into a CUDA graph: as [`push_graph_buffer`](Self::push_graph_buffer),
    /// taken through a shared borrow (the host reads it between replays), so the launch is refused if another
    /// argument reaches the same memory, and the buffer is claimed as written by the graph.
    pub fn push_graph_buffer_mut<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a impl crate::graph::GraphBuffer<T>,
    ) -> Result<usize> {
        self.push_recorded(parameter, buffer, crate::resources::uses::Access::Write)
    }

    fn push_recorded<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a impl crate::graph::GraphBuffer<T>,
        access: crate::resources::uses::Access,
    ) -> Result<usize> {
        super::check_same_context(buffer.graph_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.graph_stream().context().ordinal()))?;
        let Some(capture) = self.capture else {
            return Err(Error::invalid(parameter, "a graph buffer is pushed only by a launch recorded into a graph"));
        };
        buffer.graph_claim(capture.token(), self.uses, access == crate::resources::uses::Access::Write)?;
        let (ptr, len) = (buffer.graph_address(), buffer.graph_len());
        let write = access == crate::resources::uses::Access::Write;
        self.footprint.add(parameter, ptr, len * std::mem::size_of::<T>(), write, true);
        self.push_slice_arg(SliceArg { ptr, len });
        Ok(len)
    }

    fn push_slice_arg(&mut self, arg: SliceArg) {
        self.alignment = self.alignment.and(arg.ptr);
        self.args.push(arg);
    }

    /// A scalar parameter, by value. (`parameter` names it in errors of the launch, through the list given to
    /// [`KernelArgs::with_parameters`].)
    pub fn push_scalar<T: Copy + 'static>(&mut self, parameter: &'static str, value: T) {
        let _ = parameter;
        self.args.push(value);
    }

    /// A `TmaMatrix<T>` parameter: the tensor map of `operand` over its buffer (encoded now, with the buffer's
    /// address) and the matrix's shape, as C++ `weft::TmaMatrix<T>`. The read is recorded like a `&[T]`'s. In a
    /// launch recorded into a CUDA graph the map is baked into the graph, so the buffer must be a graph buffer
    /// (weft's `DeviceBuffer`: its drop waits for the replays, as for a `&[T]` argument of a recorded launch);
    /// cudarc's types are refused there with an error naming the parameter.
    pub fn push_tma<T: super::TmaElement>(
        &mut self,
        parameter: &'static str,
        operand: &'a super::TmaOperand<'a, T>,
    ) -> Result<()> {
        let address = if let Some(capture) = self.capture {
            let Some(graph) = operand.graph_buffer() else {
                return Err(Error::invalid(
                    parameter,
                    format!(
                        "`{}` is recorded into a CUDA graph, and the tensor map of `{parameter}` would outlive what \
                         cudarc's buffers let weft track: make the TmaOperand over a weft DeviceBuffer",
                        self.kernel
                    ),
                ));
            };
            super::check_same_context(graph.graph_stream(), self.stream)
                .map_err(|_| self.wrong_device(parameter, graph.graph_stream().context().ordinal()))?;
            graph.graph_claim(capture.token(), self.uses, false)?;
            graph.graph_address()
        } else {
            let buffer = operand.buffer();
            super::check_same_context(buffer.buffer_stream(), self.stream)
                .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
            let (ptr, guard) = buffer.read_address(self.stream, Some(self.stream))?;
            self.args.keep(guard);
            ptr
        };
        let bytes = operand.matrix().elements_spanned() * std::mem::size_of::<T>();
        self.footprint.add(parameter, address, bytes, false, true);
        let image = super::tma::kernel_image(operand.matrix(), address)?;
        self.args.push_bytes(&image, super::MAX_ARG_ALIGN)
    }

    /// A `TmaShards<T>` parameter: the tensor maps of every LSA rank's shard (encoded when `shards` was made: a
    /// window's addresses do not change while it lives) and the shape, as C++ `weft::TmaShards<T>`. The launch is
    /// recorded on the window like a `&Window<T>` argument's, in a CUDA graph's replays too (the graph borrows the
    /// window for its life).
    pub fn push_tma_shards<T>(&mut self, parameter: &'static str, shards: &'a super::TmaShards<'a, T>) -> Result<()> {
        let window = shards.window();
        // Still registered (close_all_resources releases windows): the addresses in the maps are its.
        self.window_arg(parameter, window)?;
        self.same_communicator(parameter, window.communicator_handle())?;
        if let Some(log) = self.capture {
            log.watch(window.close_watch());
        }
        self.args.push_bytes(shards.kernel_image(), super::MAX_ARG_ALIGN)?;
        // TMA only reads the shards; this rank's is the window's local part.
        let (start, bytes) = window.local_range();
        self.footprint.add(parameter, start, bytes, false, true);
        self.use_window(window)
    }

    /// An `LlA2aHandle` parameter: NCCL's handle, by value. The launch checks that it belongs to the device
    /// communicator it is launched with (the handle names a buffer inside that communicator's resources).
    pub fn push_ll_a2a_handle(&mut self, parameter: &'static str, handle: &crate::devcomm::LlA2aHandle<'_>) {
        let _ = parameter;
        self.ll_a2a_owner = Some(handle.owner());
        self.args.push(handle.kernel_arg());
    }

    /// Whether an LL all-to-all handle pushed came with the device communicator pushed.
    fn check_ll_a2a(&self) -> Result<()> {
        match self.ll_a2a_owner {
            Some(owner) if self.dev_identity != Some(owner) => Err(Error::invalid(
                "LlA2aHandle",
                format!(
                    "`{}` is launched with an LL all-to-all handle of another device communicator than its own: take \
                     it from the launch's `dev.ll_a2a_handle()`",
                    self.kernel
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Where each argument sits in the parameter buffer, in order.
    fn slots(&self) -> impl ExactSizeIterator<Item = ParamSlot> + '_ {
        self.args.offsets().iter().zip(self.args.layouts()).map(|(&offset, &(size, _))| ParamSlot { offset, size })
    }

    /// The arguments against the compiled entry point's parameters; the happy path allocates nothing.
    fn check_params(&self, spec: &crate::jit::KernelSpec, function: &cudarc::driver::CudaFunction) -> Result<()> {
        let compiled = params::compiled(function)?;
        if self.slots().len() == compiled.len() && self.slots().zip(compiled.iter()).all(|(a, b)| a.size == b.size) {
            return Ok(());
        }
        let pushed: Vec<ParamSlot> = self.slots().collect();
        params::compare(spec.name, spec.entry_point, self.parameters, &pushed, &compiled)
    }

    /// Compiles (or loads from the cache) `spec` for the stream's GPU, in the form these arguments and `checks`
    /// ask for, checks the arguments against the compiled entry point's parameter list (`cuFuncGetParamInfo`: their
    /// number, and each one's size; [`Error::ParamMismatch`] otherwise), and launches it.
    ///
    /// # Safety
    /// - `spec.source` is the C++ that `#[weft::kernel]` generated for one kernel, `spec.entry_point` one of its
    ///   entry points, and this list holds that kernel's parameters, every one, in declaration order, each pushed
    ///   with the method of its kind (the layout check catches a wrong size or count, not a wrong meaning).
    /// - Every access of the kernel stays inside the memory its arguments describe. The accesses the macro proved
    ///   in bounds do when the lengths and values pushed satisfy the bounds it inferred (the generated `launch`
    ///   checks them before calling this); the others do if `checks` is [`BoundsChecks::On`] (the device checks
    ///   them) or if the caller knows they do (`launch_unchecked`'s contract).
    /// - The kernel's resource indices (barriers, GIN signals and counters, LL all-to-all slots) are below what the
    ///   device communicator was created with (`DevComm::check_requirements` checks those the macro inferred).
    /// - For a launch recorded into a CUDA graph ([`KernelArgs::for_capture`]), everything the arguments reference
    ///   stays valid for every replay: until the graph is dropped (the generated `record` borrows it all for the
    ///   graph's life).
    pub unsafe fn launch(
        mut self,
        spec: &crate::jit::KernelSpec,
        cfg: LaunchConfig,
        checks: BoundsChecks,
    ) -> Result<()> {
        cfg.validate()?;
        self.check_ll_a2a()?;
        if let Some((first, second)) = self.footprint.overlap() {
            return Err(Error::invalid(
                second,
                format!(
                    "`{}` would reach the same device memory through `{first}` and `{second}`, and may write it \
                     through one of them while it reads or writes it through the other; pass separate buffers",
                    self.kernel
                ),
            ));
        }
        if self.capture.is_none() {
            crate::graph::refuse_foreign_capture(spec.name, self.stream)?;
        }
        let function = crate::jit::function_in(self.stream.context(), spec, self.alignment, checks)?;
        self.check_params(spec, &function)?;
        if self.ranks_on_gpu > 1 {
            crate::cuda::note_shared_gpu_traffic(self.stream.context().ordinal());
            if cfg.programmatic {
                return Err(Error::InvalidArgument {
                    argument: "cfg",
                    problem: format!(
                        "`{}` asks for a programmatic dependent launch, but {} ranks share this GPU: its blocks could \
                         start early and hold multiprocessors that a peer's blocks need before the previous kernel \
                         can finish; launch it without `.programmatic()` here (docs/multi-rank.md)",
                        spec.name, self.ranks_on_gpu
                    ),
                });
            }
            check_co_resident(spec.name, &function, self.stream, &cfg, self.ranks_on_gpu)?;
        }
        // SAFETY: the arguments are the kernel's parameters in declaration order, laid out as the compiled entry
        // point takes them (count, offsets and sizes compared just above) and as docs/kernel-abi.md fixes; the
        // accesses they allow stay in bounds (caller's precondition); every buffer, window and device communicator
        // is borrowed for 'a, beyond this call, and cudarc's guards in `args` order later frees and writes after the
        // kernel; the function was loaded into the stream's own context just above.
        let launched = unsafe { launch_raw(&function, self.stream, &cfg, &mut self.args) };
        // A block larger than the compiled kernel allows fails the launch synchronously (nothing runs, the context
        // stays usable); only then is the limit looked up, so the happy path pays nothing for the better error.
        if launched.is_err() {
            check_block_fits(spec.name, &function, &cfg)?;
        }
        if launched.is_ok() {
            if let Some(log) = self.capture {
                // The replays run this function: its module stays loaded as long as the graph.
                log.keep_function(&function);
                log.note_plain();
            }
        }
        launched
    }
}

impl<C: CapabilitySet, M: Mode> DevComm<'_, C, M> {
    /// Whether this device communicator has what `kernel` needs for a launch with `cfg`; otherwise an error naming
    /// the kernel, the shortfall and the fix.
    pub fn check_requirements(&self, kernel: &'static str, cfg: &LaunchConfig, needed: &Requirements) -> Result<()> {
        self.requirements().covers(needed).map_err(|error| match error {
            Error::InvalidArgument { problem, .. } => Error::InvalidArgument {
                argument: "dev",
                problem: format!("`{kernel}` launched with grid {:?}: {problem}", cfg.grid_dim),
            },
            other => other,
        })
    }
}

/// Whether every block of a launch with `cfg` can be resident next to the blocks of the same launch by each of the
/// other `ranks_on_gpu - 1` ranks on the stream's GPU: a kernel taking a device communicator may wait at a barrier
/// for its peers' blocks, and if those cannot be scheduled because its own blocks fill the GPU, it waits forever.
/// Each rank gets its share of the GPU ([`super::shared_gpu_share`], as [`LaunchConfig::one_wave_shared`] gives it).
pub fn check_co_resident(
    kernel: &'static str,
    function: &cudarc::driver::CudaFunction,
    stream: &CudaStream,
    cfg: &LaunchConfig,
    ranks_on_gpu: usize,
) -> Result<()> {
    let (sms, per_sm) = super::occupancy(function, stream, cfg)?;
    let (resident, fits) = (sms * per_sm, super::shared_gpu_share(sms, per_sm, ranks_on_gpu));
    if cfg.grid_size() <= fits {
        return Ok(());
    }
    Err(Error::NotCoResident {
        kernel,
        blocks: cfg.grid_size(),
        fits,
        resident,
        ranks_on_gpu,
        device: stream.context().ordinal(),
    })
}

/// Whether `cfg`'s blocks fit the compiled kernel: its `#[kernel(launch_bounds(n, …))]`, or the registers it needs,
/// cap the threads per block below CUDA's 1024. `KernelArgs::launch` asks after a failed launch, so that the caller
/// gets the kernel's name and the fix rather than `CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES` or `CUDA_ERROR_INVALID_VALUE`.
pub fn check_block_fits(
    kernel: &'static str,
    function: &cudarc::driver::CudaFunction,
    cfg: &LaunchConfig,
) -> Result<()> {
    use cudarc::driver::sys::CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK;
    let most = function.get_attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?;
    let threads = cfg.block_size();
    if threads > u64::try_from(most).unwrap_or(0) {
        return Err(Error::InvalidArgument {
            argument: "cfg",
            problem: format!(
                "`{kernel}` launched with {threads} threads per block ({:?}), but its compiled form allows at most \
                 {most} (its `launch_bounds` or its registers per thread): launch at most {most} threads per \
                 block, e.g. with `LaunchConfig::one_wave(&function, &stream, {most})`",
                cfg.block_dim
            ),
        });
    }
    Ok(())
}

/// Refuses a launch of `kernel`, which runs `gemm_block`, with blocks of other than 256 threads in x: the mainloop's
/// shared-memory stages are laid out for exactly 8 warps, and the device check that stops it otherwise ends the CUDA
/// context. The generated `launch`, `launch_unchecked` and `record` call it for such kernels.
pub fn check_block_of_256(kernel: &'static str, cfg: &LaunchConfig) -> Result<()> {
    if cfg.block_dim == (256, 1, 1) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        argument: "cfg",
        problem: format!(
            "`{kernel}` calls gemm_block, whose shared-memory stages are laid out for blocks of exactly 256 threads in \
             x (8 warps), but this launch has blocks of {:?}: launch it with `LaunchConfig::linear(blocks, 256)` or \
             the kernel's `one_wave(comm, stream, 256)`",
            cfg.block_dim
        ),
    })
}

/// The error of a failed `#[kernel(len(...))]` check: which kernel, which rule, the values seen.
pub fn length_check_failed(kernel: &'static str, rule: &str, values: &[(&str, u64)]) -> Error {
    let seen = values.iter().map(|(name, value)| format!("{name} = {value}")).collect::<Vec<_>>().join(", ");
    Error::InvalidArgument {
        argument: "len",
        problem: format!("`{kernel}` requires `{rule}`, but {seen}: pass buffers of matching lengths"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_argument_may_not_overlap_another() {
        // Eager: `&mut` arguments are exclusive by borrow, so slices alone are never compared.
        let mut eager = Footprint::new();
        eager.add("x", 0x1000, 64, false, true);
        eager.add("out", 0x1000, 64, true, false);
        assert_eq!(eager.overlap(), None);
        // A window (written through a shared borrow) over the memory of a slice argument.
        let mut window = Footprint::new();
        window.add("x", 0x1000, 256, true, true);
        window.add("y", 0x1040, 64, false, true);
        assert_eq!(window.overlap(), Some(("x", "y")));
        // A recorded launch: input and output the same buffer, both shared in the graph.
        let mut recorded = Footprint::new();
        recorded.add("input", 0x2000, 128, false, true);
        recorded.add("bias", 0x3000, 128, false, true);
        recorded.add("out", 0x2000, 128, true, true);
        assert_eq!(recorded.overlap(), Some(("input", "out")));
        // Adjacent ranges and read-only overlaps are fine; empty ones reach nothing.
        let mut fine = Footprint::new();
        fine.add("a", 0x2000, 128, true, true);
        fine.add("b", 0x2080, 128, true, true);
        fine.add("c", 0x2080, 64, false, true);
        fine.add("d", 0x2000, 0, true, true);
        assert_eq!(fine.overlap(), Some(("b", "c")), "only the written b overlaps c");
        let mut reads = Footprint::new();
        reads.add("a", 0x2000, 128, false, true);
        reads.add("b", 0x2000, 128, false, true);
        reads.add("w", 0x9000, 8, true, true);
        assert_eq!(reads.overlap(), None);
    }

    #[test]
    fn many_arguments_spill_past_the_inline_array() {
        let mut many = Footprint::new();
        for i in 0..Footprint::INLINE as u64 + 3 {
            many.add("slice", 0x10_0000 + i * 0x100, 0x100, false, true);
        }
        many.add("window", 0x10_0000 + 9 * 0x100 + 8, 8, true, true);
        assert_eq!(many.overlap(), Some(("slice", "window")));
    }

    #[test]
    fn a_launch_takes_the_device_communicator_and_windows_of_one_communicator() {
        let (parent, child) = (0x1000, 0x2000);
        let mut launch = OneCommunicator::default();
        launch.require("k", "dev", parent).unwrap();
        launch.require("k", "x", parent).unwrap();
        launch.require("k", "y", parent).unwrap();
        // A window of a split child next to the parent's device communicator, and the other way round.
        match launch.require("k", "z", child) {
            Err(Error::MixedCommunicators { kernel: "k", parameter: "z", first: "dev" }) => {}
            other => panic!("a window of another communicator was accepted: {other:?}"),
        }
        let mut windows_only = OneCommunicator::default();
        windows_only.require("k", "x", child).unwrap();
        let refused = windows_only.require("k", "y", parent).unwrap_err().to_string();
        assert!(refused.contains("`y` belongs to another NCCL communicator than `x`"), "{refused}");
        assert!(refused.contains("create them on the same one"), "{refused}");
    }
}
