// GIN items exist only on device communicators whose capability set includes GIN.
use weft_host::caps::Lsa;
use weft_host::{Communicator, DevComm, Requirements};

fn demo(comm: &Communicator) {
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&Requirements::new()).unwrap();
    let _ = dev.gin_signals();
}

fn main() {}
