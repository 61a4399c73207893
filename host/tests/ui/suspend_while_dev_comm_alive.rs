// A device communicator borrows its communicator: suspending while it lives must not compile.
use weft_host::caps::Lsa;
use weft_host::{Communicator, DevComm, Requirements, SuspendFlags};

fn demo(comm: Communicator) {
    let dev: DevComm<'_, Lsa> = comm.dev_comm(&Requirements::new().lsa_barriers(1)).unwrap();
    let suspended = comm.suspend(SuspendFlags::MEMORY).unwrap();
    drop(dev);
    drop(suspended);
}

fn main() {}
