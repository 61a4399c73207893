//! The process-wide table of loaded kernel modules, so a launch after the first costs two map lookups.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};

use super::{load, load_function, CompileRequest, GpuArch, JitError, KernelCache, Toolchain};

/// One kernel as the `#[weft::kernel]` macro describes it: its generated source and the entry point to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelSpec {
    /// The kernel's name (`allreduce_add`).
    pub name: &'static str,
    /// The complete generated `.cu` source. Being `'static`, its address identifies it for the life of the
    /// process, so lookups never hash it.
    pub source: &'static str,
    /// The `extern "C"` function to launch (`allreduce_add__f32`).
    pub entry_point: &'static str,
}

/// Which compiled form of a kernel to run: one where every slice and window argument is known to start on a
/// 16-byte boundary, or one for any alignment (docs/kernel-abi.md, "Argument alignment").
///
/// In the `Aligned16` form a pack access on an argument is one 16-byte instruction with nothing around it; in the
/// `Any` form it tests the address and falls back to lane-by-lane accesses. Generated launchers pick the form from
/// the arguments of each launch; the `Any` form is compiled only when a launch needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ArgAlignment {
    /// Every slice pointer and window byte offset is a multiple of 16 (every weft and cudarc allocation is).
    #[default]
    Aligned16,
    /// No promise: some argument may start mid-pack (a sub-slice at an odd element offset).
    Any,
}

impl ArgAlignment {
    /// This form, narrowed by one more argument address (a slice's pointer, a window's byte offset).
    pub fn and(self, address: u64) -> ArgAlignment {
        if address % 16 == 0 {
            self
        } else {
            ArgAlignment::Any
        }
    }

    /// The nvcc flags that select this form in `weft.cuh` (part of the cache key).
    pub fn flags(self) -> &'static [&'static str] {
        self.flags_with(BoundsChecks::Off)
    }

    /// The nvcc flags of this alignment form with device-side bounds checks `checks` (part of the cache key).
    pub fn flags_with(self, checks: BoundsChecks) -> &'static [&'static str] {
        match (self, checks) {
            (ArgAlignment::Aligned16, BoundsChecks::Off) => &["-DWEFT_ALIGNED_ARGS=1"],
            (ArgAlignment::Any, BoundsChecks::Off) => &[],
            (ArgAlignment::Aligned16, BoundsChecks::On) => &["-DWEFT_ALIGNED_ARGS=1", "-DWEFT_BOUNDS_CHECKS=1"],
            (ArgAlignment::Any, BoundsChecks::On) => &["-DWEFT_BOUNDS_CHECKS=1"],
        }
    }
}

/// Whether the accesses `#[weft::kernel]` could not prove in bounds are checked on the device (docs/macro.md,
/// "Bounds"): a kernel's `launch` runs the form with checks when its body (or a device fn it calls) has such an
/// access, `launch_unchecked` the form without. Accesses the macro proved never carry a check.
///
/// A failed check prints the Rust line, the index and the length, and stops the kernel with a trap: the launch's
/// stream then reports `CUDA_ERROR_LAUNCH_FAILED` (or `ILLEGAL_INSTRUCTION`) at its next synchronization, and the
/// CUDA context cannot be used further, as after a Rust panic in `panic = "abort"` code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BoundsChecks {
    /// No device-side check (`WEFT_BOUNDS_CHECKS` undefined).
    #[default]
    Off,
    /// Unproven accesses are checked (`-DWEFT_BOUNDS_CHECKS=1`).
    On,
}

/// Identifies one module: a source (by address and length; see [`KernelSpec::source`]) compiled in one form for
/// one CUDA context. Entries keep their context alive, so a context's address cannot be reused by another while in
/// the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ModuleKey {
    source: usize,
    source_len: usize,
    alignment: ArgAlignment,
    checks: BoundsChecks,
    device: usize,
    context: usize,
}

#[derive(Debug)]
struct LoadedModule {
    module: Arc<CudaModule>,
    functions: Mutex<HashMap<&'static str, CudaFunction>>,
}

/// A module's slot; its mutex keeps two threads from compiling or loading the same module at once.
type Slot = Arc<Mutex<Option<Arc<LoadedModule>>>>;

/// Identifies a module by its source's content, for sources seen at more than one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ContentKey {
    name_hash: u64,
    source_hash: u64,
    source_len: usize,
    alignment: ArgAlignment,
    checks: BoundsChecks,
    device: usize,
    context: usize,
}

/// The loaded modules, by source address (the fast path of every launch) and by source content.
#[derive(Debug, Default)]
struct Tables {
    by_address: HashMap<ModuleKey, Slot>,
    /// One slot per distinct source: a kernel module's `SOURCE` constant and its launcher's static may live at two
    /// addresses, and loading the same module twice would both waste memory and load a kernel at its first launch,
    /// which waits for the whole device (docs/multi-rank.md).
    by_content: HashMap<ContentKey, Slot>,
}

/// Compiles, caches and loads kernels on demand, and remembers the loaded modules per CUDA context.
///
/// Generated launchers use the process-wide one through [`super::function`]. Loaded modules (and so their
/// contexts) stay alive as long as the registry; [`KernelRegistry::clear`] lets them go.
#[derive(Debug)]
pub struct KernelRegistry {
    weft_header: &'static str,
    /// `None`: the process-wide [`super::toolchain`].
    toolchain: Option<Toolchain>,
    /// `None`: [`KernelCache::global`].
    cache: Option<KernelCache>,
    modules: Mutex<Tables>,
}

impl KernelRegistry {
    /// A registry with its own toolchain and cache, compiling against `weft_header` (`weft_device::WEFT_CUH`).
    pub fn new(toolchain: Toolchain, cache: KernelCache, weft_header: &'static str) -> KernelRegistry {
        KernelRegistry { weft_header, toolchain: Some(toolchain), cache: Some(cache), modules: Mutex::default() }
    }

    /// The process-wide registry: the discovered toolchain (checked against the loaded libnccl), the cache of
    /// [`KernelCache::global`], and weft's own device header.
    pub fn global() -> &'static KernelRegistry {
        static GLOBAL: OnceLock<KernelRegistry> = OnceLock::new();
        GLOBAL.get_or_init(|| KernelRegistry {
            weft_header: weft_device::WEFT_CUH,
            toolchain: None,
            cache: None,
            modules: Mutex::default(),
        })
    }

    /// The function `spec.entry_point` of `spec`'s module in `ctx`, compiled for 16-byte-aligned arguments
    /// ([`ArgAlignment::Aligned16`]), compiling (or reading the cubin from the disk cache) and loading the module
    /// the first time.
    pub fn function(&self, ctx: &Arc<CudaContext>, spec: &KernelSpec) -> Result<CudaFunction, JitError> {
        self.function_for(ctx, spec, ArgAlignment::Aligned16)
    }

    /// The function `spec.entry_point` of `spec`'s module compiled in form `alignment`, as [`Self::function`].
    pub fn function_for(
        &self,
        ctx: &Arc<CudaContext>,
        spec: &KernelSpec,
        alignment: ArgAlignment,
    ) -> Result<CudaFunction, JitError> {
        self.function_in(ctx, spec, alignment, BoundsChecks::Off)
    }

    /// The function `spec.entry_point` of `spec`'s module compiled in form `alignment` with device-side bounds
    /// checks `checks`, as [`Self::function`].
    pub fn function_in(
        &self,
        ctx: &Arc<CudaContext>,
        spec: &KernelSpec,
        alignment: ArgAlignment,
        checks: BoundsChecks,
    ) -> Result<CudaFunction, JitError> {
        let loaded = self.module(ctx, spec, alignment, checks)?;
        let mut functions = loaded.functions.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(function) = functions.get(spec.entry_point) {
            return Ok(function.clone());
        }
        let function = load_function(&loaded.module, spec.name, spec.entry_point)?;
        crate::cuda::load_now(&function, ctx)
            .map_err(|source| JitError::Driver { action: "loading the kernel onto the device", source })?;
        functions.insert(spec.entry_point, function.clone());
        Ok(function)
    }

    /// Forgets every loaded module; functions already handed out stay valid (they hold their module).
    pub fn clear(&self) {
        *self.modules.lock().unwrap_or_else(PoisonError::into_inner) = Tables::default();
    }

    fn module(
        &self,
        ctx: &Arc<CudaContext>,
        spec: &KernelSpec,
        alignment: ArgAlignment,
        checks: BoundsChecks,
    ) -> Result<Arc<LoadedModule>, JitError> {
        let key = ModuleKey {
            source: spec.source.as_ptr() as usize,
            source_len: spec.source.len(),
            alignment,
            checks,
            device: ctx.ordinal(),
            context: ctx.cu_ctx() as usize,
        };
        let slot = {
            let mut tables = self.modules.lock().unwrap_or_else(PoisonError::into_inner);
            match tables.by_address.get(&key) {
                Some(slot) => slot.clone(),
                None => {
                    let hash = |text: &str| {
                        use std::hash::{Hash, Hasher};
                        let mut hasher = std::collections::hash_map::DefaultHasher::new();
                        text.hash(&mut hasher);
                        hasher.finish()
                    };
                    let content = ContentKey {
                        name_hash: hash(spec.name),
                        source_hash: hash(spec.source),
                        source_len: spec.source.len(),
                        alignment,
                        checks,
                        device: key.device,
                        context: key.context,
                    };
                    let slot = tables.by_content.entry(content).or_default().clone();
                    tables.by_address.insert(key, slot.clone());
                    slot
                }
            }
        };
        let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(loaded) = slot.as_ref() {
            return Ok(loaded.clone());
        }
        let toolchain = match &self.toolchain {
            Some(toolchain) => toolchain,
            None => super::toolchain()?,
        };
        let cache = match &self.cache {
            Some(cache) => cache,
            None => KernelCache::global()?,
        };
        let capability = ctx
            .compute_capability()
            .map_err(|source| JitError::Driver { action: "reading the device's compute capability", source })?;
        let request =
            CompileRequest::new(spec.name, spec.source, self.weft_header, GpuArch::from_compute_capability(capability))
                .with_flags(alignment.flags_with(checks));
        let compiled = cache.get_or_compile(toolchain, &request)?;
        if crate::cuda::late_load_on_shared_gpu(ctx.ordinal()) {
            tracing::warn!(
                kernel = spec.name,
                device = ctx.ordinal(),
                "loading a kernel onto a GPU whose ranks already communicate: the load waits for the whole device \
                 and can hang every rank sharing it; load it before the first collective (its `function` or \
                 `one_wave`), or inside `Communicator::with_gpu_peers_idle` (docs/multi-rank.md, \"Load before \
                 launch\")"
            );
        }
        let loaded = Arc::new(LoadedModule { module: load(ctx, &compiled)?, functions: Mutex::default() });
        *slot = Some(loaded.clone());
        Ok(loaded)
    }
}
