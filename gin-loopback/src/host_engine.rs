//! An engine over host memory, for the unit tests: it runs each operation when it is enqueued.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::{Engine, Marker};
use crate::error::Result;

#[derive(Debug)]
pub(crate) struct HostEngine;

impl Engine for HostEngine {
    fn copy(&self, destination: u64, source: u64, bytes: usize, _source_is_host: bool) -> Result<()> {
        // SAFETY: in the unit tests every registered part is a live host allocation and the backend checked both
        // ranges against their parts before calling; the parts of distinct registrations do not overlap.
        unsafe { std::ptr::copy(source as *const u8, destination as *mut u8, bytes) };
        Ok(())
    }

    fn add(&self, address: u64, value: u64) -> Result<()> {
        // SAFETY: the address lies inside a live, 8-byte aligned host registration (checked by the caller), and every
        // access to it during the tests is atomic.
        let word = unsafe { AtomicU64::from_ptr(address as *mut u64) };
        word.fetch_add(value, Ordering::AcqRel);
        Ok(())
    }

    fn mark(&self) -> Result<Marker> {
        Ok(Marker(0))
    }

    fn is_done(&self, _marker: Marker) -> Result<bool> {
        Ok(true)
    }

    fn release(&self, _marker: Marker) {}

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}
