// A non-blocking initialisation yields a Pending: its communicator is reachable only by polling it.
use weft_host::{Communicator, Config, UniqueId};

fn main() {
    let id = UniqueId::new().unwrap();
    let pending = Communicator::uninit_nonblocking(0).unwrap().init(2, 0, &id, &Config::new()).unwrap();
    let _ = pending.rank();
}
