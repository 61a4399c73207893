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
    /// The NCCL communicator of the first device communicator or window pushed: every other one must be of the
    /// same ([`Error::MixedCommunicators`]).
    communicator: OneCommunicator,
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

    /// The stream the kernel is launched on (when recording into a CUDA graph, the capturing stream).
    pub fn stream(&self) -> &'a Arc<CudaStream> {
        self.stream
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
        window.note_launch(self.uses);
        Ok(arg.len)
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
        super::check_same_context(buffer.buffer_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
        let len = buffer.buffer_len();
        let (ptr, guard) = buffer.read_address(self.stream);
        self.args.keep(guard);
        self.push_slice_arg(SliceArg { ptr, len });
        Ok(len)
    }

    /// A `&mut [T]` parameter; returns its length.
    pub fn push_slice_mut<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a mut impl KernelSliceMut<T>,
    ) -> Result<usize> {
        super::check_same_context(buffer.buffer_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
        let len = buffer.buffer_len();
        let (ptr, guard) = buffer.write_address(self.stream);
        self.args.keep(guard);
        self.push_slice_arg(SliceArg { ptr, len });
        Ok(len)
    }

    /// A `&[T]` or `&mut [T]` parameter of a launch recorded into a CUDA graph (weft memory only: see
    /// [`crate::graph::GraphBuffer`]); returns its length. No event is recorded: the graph's replays are noted on
    /// the buffer instead.
    pub fn push_graph_buffer<T>(
        &mut self,
        parameter: &'static str,
        buffer: &'a impl crate::graph::GraphBuffer<T>,
    ) -> Result<usize> {
        super::check_same_context(buffer.graph_stream(), self.stream)
            .map_err(|_| self.wrong_device(parameter, buffer.graph_stream().context().ordinal()))?;
        if self.capture.is_none() {
            return Err(Error::invalid(parameter, "a graph buffer is pushed only by a launch recorded into a graph"));
        }
        buffer.graph_note_use(self.uses);
        let len = buffer.graph_len();
        self.push_slice_arg(SliceArg { ptr: buffer.graph_address(), len });
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
        let address = if self.capture.is_some() {
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
            graph.graph_note_use(self.uses);
            graph.graph_address()
        } else {
            let buffer = operand.buffer();
            super::check_same_context(buffer.buffer_stream(), self.stream)
                .map_err(|_| self.wrong_device(parameter, buffer.buffer_stream().context().ordinal()))?;
            let (ptr, guard) = buffer.read_address(self.stream);
            self.args.keep(guard);
            ptr
        };
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
        window.note_launch(self.uses);
        Ok(())
    }

    /// An `LlA2aHandle` parameter, by value.
    pub fn push_ll_a2a_handle<T: Copy + 'static>(&mut self, parameter: &'static str, handle: T) {
        let _ = parameter;
        self.args.push(handle);
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
