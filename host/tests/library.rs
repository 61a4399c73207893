//! CPU tests against the real libnccl 2.28.9 and 2.32.3 from the pip wheels (`cargo xtask test` provisions
//! them and exports `WEFT_TEST_LIBNCCL_2_28_9` / `WEFT_TEST_LIBNCCL_2_32_3`). libnccl loads without a GPU.

use weft_host::sys::Library;
use weft_host::{result, Error, Version};

fn open(var: &str) -> &'static Library {
    let path = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run the tests through `cargo xtask test`, which provisions libnccl and sets it")
    });
    let library = Library::open(&path).unwrap_or_else(|e| panic!("opening {path}: {e}"));
    Box::leak(Box::new(library))
}

#[test]
fn versions_are_read_from_the_loaded_library() {
    let old = open("WEFT_TEST_LIBNCCL_2_28_9");
    let new = open("WEFT_TEST_LIBNCCL_2_32_3");
    assert_eq!(old.version(), Version::new(2, 28, 9));
    assert_eq!(new.version(), Version::new(2, 32, 3));
    assert_eq!(result::get_version(old).unwrap(), Version::new(2, 28, 9));
    assert!(old.path().ends_with("libnccl.so.2"), "{}", old.path().display());
}

#[test]
fn calls_missing_from_2_28_are_unsupported_with_their_version() {
    let old = open("WEFT_TEST_LIBNCCL_2_28_9");
    let null = std::ptr::null_mut();
    // SAFETY: the symbol lookup fails before anything is called, so the null communicator is never read.
    let suspend = unsafe { result::comm_suspend(old, null, 1) }.unwrap_err();
    match &suspend {
        Error::Unsupported { call, needs, found } => {
            assert_eq!(*call, "ncclCommSuspend");
            assert_eq!(*needs, Version::new(2, 29, 0));
            assert_eq!(*found, Version::new(2, 28, 9));
        }
        other => panic!("expected Unsupported, got {other}"),
    }
    assert!(suspend.to_string().contains("needs NCCL 2.29.0 or later, but the loaded libnccl is 2.28.9"));
    // SAFETY: as above.
    let grow =
        unsafe { result::comm_grow(old, null, 2, None, -1, std::ptr::null_mut(), std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(grow, Error::Unsupported { call: "ncclCommGrow", .. }), "{grow}");
    // SAFETY: as above.
    let props = unsafe { result::comm_query_properties(old, null, std::ptr::null_mut()) }.unwrap_err();
    assert!(matches!(props, Error::Unsupported { call: "ncclCommQueryProperties", .. }), "{props}");
}

#[test]
fn nccl_errors_carry_code_description_and_last_error() {
    let new = open("WEFT_TEST_LIBNCCL_2_32_3");
    // A null communicator is rejected by NCCL itself with ncclInvalidArgument.
    // SAFETY: NCCL checks the communicator for null before using it.
    let error = unsafe { result::comm_count(new, std::ptr::null_mut()) }.unwrap_err();
    match &error {
        Error::Nccl { call, code, description, .. } => {
            assert_eq!(*call, "ncclCommCount");
            assert_eq!(*code, weft_host::ResultCode::InvalidArgument);
            assert!(!description.is_empty());
        }
        other => panic!("expected an NCCL error, got {other}"),
    }
    assert_eq!(result::error_string(new, 5), "invalid usage (run with NCCL_DEBUG=WARN for details)");
}

#[test]
fn a_missing_library_is_a_clear_error() {
    let error = Library::open("/nonexistent/libnccl.so.2").unwrap_err();
    let text = error.to_string();
    assert!(text.contains("/nonexistent/libnccl.so.2") && text.contains("NCCL_HOME"), "{text}");
}
