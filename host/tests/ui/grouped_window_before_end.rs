// Inside a group NCCL writes a window's handle only when the group ends: window_in yields a Pending, whose
// window (and handle) is reachable only by polling it after the end.
use weft_host::{Communicator, Config, DeviceBuffer, Group, UniqueId, WindowFlags};

fn main() {
    let id = UniqueId::new().unwrap();
    let comm = Communicator::init_rank(0, 1, 0, &id, &Config::new()).unwrap();
    let stream = comm.context().new_stream().unwrap();
    let group = Group::start().unwrap();
    let buffer = DeviceBuffer::<f32>::new(&stream, 16).unwrap();
    let window = comm.window_in(&group, buffer, WindowFlags::DEFAULT).unwrap();
    let _ = window.raw();
    group.end().unwrap();
}
