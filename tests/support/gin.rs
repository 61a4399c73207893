//! What the GIN tests share (tests/gpu_gin.rs, tests/gpu_gin_faults.rs): whether GIN must be there, and a device
//! communicator with GIN or a skip that says why.

use weft::host::{Communicator, DevComm, Error, Requirements};

/// Whether GIN tests must run here: where the environment promises a GIN backend, its absence fails the test.
pub fn gin_required() -> bool {
    std::env::var("WEFT_TEST_REQUIRE_GIN").is_ok_and(|v| v == "1")
}

/// The device communicator a test needs, or `None` (after saying why) where the communicator has no GIN and GIN is
/// not required.
pub fn gin_dev_comm<'c, C>(comm: &'c Communicator, requirements: &Requirements) -> Result<Option<DevComm<'c, C>>, Error>
where
    C: weft::host::caps::CapabilitySet,
{
    match comm.dev_comm::<C>(requirements) {
        Ok(dev) => Ok(Some(dev)),
        Err(error @ Error::MissingCapability { .. }) if !gin_required() => {
            if comm.rank() == 0 {
                println!("skipped: no GIN here ({error}); docs/gin.md says how to run GIN on one machine");
            }
            Ok(None)
        }
        Err(error) => Err(error),
    }
}
