//! A two-rank non-blocking initialisation whose second rank never joins must end in a clean timeout
//! within its deadline, not a hang. Its own test binary, so a regression cannot stall the other tests.

use std::time::{Duration, Instant};

use weft_host::{Communicator, Config, Error, UniqueId};

#[test]
#[ignore = "needs a CUDA GPU"]
fn nonblocking_init_times_out_when_a_peer_never_joins() {
    let id = UniqueId::new().unwrap();
    let deadline = Duration::from_secs(5);
    let started = Instant::now();
    let pending = Communicator::uninit_nonblocking(0).unwrap().init(2, 0, &id, &Config::new()).unwrap();
    let outcome = pending.wait(deadline);
    let elapsed = started.elapsed();
    println!("non-blocking init with a missing peer ended after {elapsed:?}: {:?}", outcome.as_ref().err());
    assert!(matches!(outcome, Err(Error::Timeout { after, .. }) if after == deadline), "{:?}", outcome.err());
    assert!(elapsed < deadline + Duration::from_secs(10), "abort took too long: {elapsed:?}");
}
