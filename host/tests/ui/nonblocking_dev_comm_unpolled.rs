// On a non-blocking communicator NCCL writes a device communicator when the creation completes: dev_comm yields
// a Pending, and its kernel argument is reachable only by polling it to completion.
use std::time::Duration;

use weft_host::caps::Lsa;
use weft_host::{Communicator, Config, Requirements, UniqueId};

fn main() {
    let id = UniqueId::new().unwrap();
    let pending = Communicator::uninit_nonblocking(0).unwrap().init(1, 0, &id, &Config::new()).unwrap();
    let comm = pending.wait(Duration::from_secs(60)).unwrap();
    let dev = comm.dev_comm::<Lsa>(&Requirements::new()).unwrap();
    let _ = dev.kernel_arg_bytes();
}
