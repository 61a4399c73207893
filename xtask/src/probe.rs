//! Questions asked of the CUDA driver through dlopen. The only `unsafe` in xtask lives here, next
//! to the C signatures it depends on. (libnccl is opened by weft-host's own loader, as at run time.)

use std::ffi::{c_char, c_int, c_uint, CStr};

use libloading::{Library, Symbol};

/// A GPU as the driver sees it.
#[derive(Debug, Clone)]
pub struct Gpu {
    pub ordinal: i32,
    pub name: String,
    pub compute_capability: (i32, i32),
}

/// What the CUDA driver said.
#[derive(Debug, Clone)]
pub struct DriverReport {
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_version: Option<i32>,
    pub gpus: Vec<Gpu>,
}

/// Why the driver could not list GPUs, as a line a human can act on.
#[derive(Debug, Clone)]
pub enum DriverProblem {
    /// libcuda.so.1 is not installed (the normal state of a CPU machine).
    NoDriver(String),
    /// The driver is there but a call failed (no device, driver/kernel-module mismatch, …).
    CallFailed { call: &'static str, code: i32, name: String },
}

// CUresult and CUdevice are C ints; CUdevice_attribute is a C enum.
type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// Lists the GPUs the driver can see.
pub fn probe_gpus() -> Result<DriverReport, DriverProblem> {
    // SAFETY: libcuda's initialisers only register the library; the driver does its real
    // set-up in cuInit, which is called explicitly below.
    let library =
        unsafe { Library::new("libcuda.so.1") }.map_err(|error| DriverProblem::NoDriver(error.to_string()))?;
    let driver = Driver { library: &library };

    let get_version: Symbol<'_, CuDriverGetVersion> = driver.symbol(b"cuDriverGetVersion\0")?;
    let mut driver_version: c_int = 0;
    // SAFETY: the argument points to a live, writable int; this call is allowed before cuInit.
    let driver_version = (unsafe { get_version(&mut driver_version) } == 0).then_some(driver_version);

    let init: Symbol<'_, CuInit> = driver.symbol(b"cuInit\0")?;
    // SAFETY: cuInit takes flags by value and must be given 0.
    driver.check("cuInit", unsafe { init(0) })?;

    let get_count: Symbol<'_, CuDeviceGetCount> = driver.symbol(b"cuDeviceGetCount\0")?;
    let get_device: Symbol<'_, CuDeviceGet> = driver.symbol(b"cuDeviceGet\0")?;
    let get_name: Symbol<'_, CuDeviceGetName> = driver.symbol(b"cuDeviceGetName\0")?;
    let get_attribute: Symbol<'_, CuDeviceGetAttribute> = driver.symbol(b"cuDeviceGetAttribute\0")?;

    let mut count: c_int = 0;
    // SAFETY: cuInit succeeded; the argument points to a live, writable int.
    driver.check("cuDeviceGetCount", unsafe { get_count(&mut count) })?;
    let mut gpus = Vec::new();
    for ordinal in 0..count {
        let mut device: c_int = 0;
        // SAFETY: ordinal < count as just reported; the out-pointer is a live int.
        driver.check("cuDeviceGet", unsafe { get_device(&mut device, ordinal) })?;
        let mut name = [0 as c_char; 256];
        // SAFETY: the buffer holds `len` bytes and the driver writes at most `len`, NUL included.
        driver.check("cuDeviceGetName", unsafe { get_name(name.as_mut_ptr(), name.len() as c_int, device) })?;
        // SAFETY: cuDeviceGetName succeeded, so the buffer holds a NUL-terminated string, and
        // the zero-initialised buffer guarantees a terminator even if it were truncated.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        let mut major: c_int = 0;
        let mut minor: c_int = 0;
        // SAFETY: valid device handle, valid attribute ids, live out-pointers.
        driver.check("cuDeviceGetAttribute", unsafe {
            get_attribute(&mut major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        })?;
        // SAFETY: as above.
        driver.check("cuDeviceGetAttribute", unsafe {
            get_attribute(&mut minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        })?;
        gpus.push(Gpu { ordinal, name, compute_capability: (major, minor) });
    }
    Ok(DriverReport { driver_version, gpus })
}

struct Driver<'lib> {
    library: &'lib Library,
}

impl<'lib> Driver<'lib> {
    /// Callers pick `T` to match the symbol's C declaration (see the aliases above; cuda.h
    /// keeps these unversioned names stable).
    fn symbol<T>(&self, name: &'static [u8]) -> Result<Symbol<'lib, T>, DriverProblem> {
        // SAFETY: each caller names a driver API function whose C declaration matches `T`
        // (the aliases above), and the symbol cannot outlive the library it borrows.
        unsafe { self.library.get(name) }
            .map_err(|error| DriverProblem::NoDriver(format!("libcuda.so.1 lacks a driver API symbol: {error}")))
    }

    fn check(&self, call: &'static str, code: c_int) -> Result<(), DriverProblem> {
        if code == 0 {
            return Ok(());
        }
        Err(DriverProblem::CallFailed { call, code, name: self.error_name(code) })
    }

    fn error_name(&self, code: c_int) -> String {
        let Ok(get_error_name) = self.symbol::<CuGetErrorName>(b"cuGetErrorName\0") else {
            return String::from("unknown error");
        };
        let mut name: *const c_char = std::ptr::null();
        // SAFETY: cuGetErrorName may be called before (or after a failed) cuInit; the
        // out-pointer is live.
        let status = unsafe { get_error_name(code, &mut name) };
        if status != 0 || name.is_null() {
            return String::from("unknown error");
        }
        // SAFETY: on success the driver returns a pointer to a static NUL-terminated string.
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }
}
