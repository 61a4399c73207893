//! GPU tests of NCCL outputs written later (issue 12, item 2): window handles and device communicators that NCCL
//! writes at the end of an NCCL group, or when an operation on a non-blocking communicator completes. Every rank
//! of the placement (`WEFT_RANKS`, else one per visible GPU) runs from the test's one thread, which is only
//! possible because the collective setup calls are grouped (or non-blocking). Run on a GPU machine with
//! `--include-ignored`.

use std::time::Duration;

use weft_host::caps::Lsa;
use weft_host::{
    Communicator, Config, DevComm, DeviceBuffer, Error, Group, Mode, Pending, Placement, Polled, Requirements,
    UniqueId, Version, Window, WindowFlags,
};

const WAIT: Duration = Duration::from_secs(120);
const LEN: usize = 4096;

fn placement() -> Placement {
    let placement = Placement::from_env().expect("WEFT_RANKS");
    println!("{}", placement.describe());
    placement
}

/// `sizeof(ncclDevComm)` of the releases weft has measured (docs/host.md).
fn measured_dev_comm_size(version: Version) -> Option<usize> {
    match (version.major(), version.minor(), version.patch()) {
        (2, 28, 7..=9) | (2, 29, 2..=3) => Some(200),
        (2, 29, 7) => Some(224),
        (2, 30, 3..=7) => Some(240),
        (2, 31, 2) | (2, 32, 3) => Some(248),
        _ => None,
    }
}

/// What NCCL wrote is usable: a non-null window over this rank's buffer, a device communicator of the release's
/// size that NCCL filled in.
fn check_written<M: Mode>(dev: &DevComm<'_, Lsa, M>, window: &Window<'_, f32, M>, version: Version) {
    assert!(!window.raw().unwrap().is_null(), "NCCL wrote the window handle");
    if version.at_least(Version::new(2, 29, 0)) {
        assert_eq!(window.user_address().unwrap(), window.buffer().device_address(), "the window is over our buffer");
    }
    let bytes = dev.kernel_arg_bytes().unwrap();
    assert!(bytes.iter().any(|b| *b != 0), "NCCL filled the device communicator");
    if let Some(size) = measured_dev_comm_size(version) {
        assert_eq!(bytes.len(), size, "the kernel argument is exactly NCCL {version}'s ncclDevComm");
    }
}

/// Polls each pending value once inside the open group: none may be ready before NCCL ran the group.
macro_rules! still_pending {
    ($pending:expr) => {
        $pending
            .into_iter()
            .map(|p: Pending<_>| match p.poll().expect("poll inside the group") {
                Polled::Pending(p) => p,
                Polled::Ready(_) => panic!("a value was ready before its group ended"),
            })
            .collect::<Vec<_>>()
    };
}

/// `init_all`, then every rank's device communicator and window registration in one group from this thread;
/// their handles are read only after the group ended.
#[test]
#[ignore = "needs a CUDA GPU"]
fn init_all_then_grouped_dev_comms_and_windows_for_every_rank_from_one_thread() {
    let placement = placement();
    let comms = Communicator::init_all(placement.devices()).expect("ncclCommInitAll");
    let version = comms[0].nccl_version();
    let streams: Vec<_> = comms.iter().map(|c| c.context().new_stream().unwrap()).collect();
    let requirements = Requirements::new().lsa_barriers(4).resource_buffer(4096, 256);

    let group = Group::start().unwrap();
    // A blocking communicator cannot hand out what NCCL writes at the group's end.
    let refused = comms[0].dev_comm::<Lsa>(&requirements).map(|_| ()).unwrap_err();
    assert!(matches!(refused, Error::InvalidArgument { .. }) && refused.to_string().contains("dev_comm_in"));
    let refused = comms[0].window(DeviceBuffer::<f32>::new(&streams[0], LEN).unwrap(), WindowFlags::COLL_SYMMETRIC);
    assert!(refused.map(|_| ()).unwrap_err().to_string().contains("window_in"));
    let devs: Vec<_> = comms.iter().map(|c| c.dev_comm_in::<Lsa>(&group, &requirements).unwrap()).collect();
    let windows: Vec<_> = comms
        .iter()
        .zip(&streams)
        .map(|(c, s)| c.window_in(&group, DeviceBuffer::<f32>::new(s, LEN).unwrap(), WindowFlags::COLL_SYMMETRIC))
        .collect::<Result<_, _>>()
        .unwrap();
    let (devs, windows) = (still_pending!(devs), still_pending!(windows));
    assert!(!group.end().unwrap(), "a group of blocking communicators completes at its end");

    let devs: Vec<_> = devs.into_iter().map(|d| d.wait(WAIT).unwrap()).collect();
    let windows: Vec<_> = windows.into_iter().map(|w| w.wait(WAIT).unwrap()).collect();
    for (dev, window) in devs.iter().zip(&windows) {
        check_written(dev, window, version);
        assert!(dev.resource_buffer(0).is_some());
    }
    println!("{} rank(s), NCCL {version}: grouped device communicators and windows written", comms.len());
    drop((devs, windows));
}

/// Every rank on a non-blocking communicator, from this thread: initialisation in one group; then device
/// communicators and windows issued for every rank before any is waited for; then both again in one group.
#[test]
#[ignore = "needs a CUDA GPU"]
fn nonblocking_dev_comms_and_windows_are_pending_until_nccl_wrote_them() {
    let placement = placement();
    let nranks = placement.nranks();
    let id = UniqueId::new().unwrap();
    let group = Group::start().unwrap();
    let pending: Vec<_> = (0..nranks)
        .map(|rank| {
            let sharing = placement.ranks_on_gpu(rank);
            let config = weft_host::placement::shared_gpu_config(&Config::new(), sharing);
            Communicator::uninit_nonblocking(placement.devices()[rank])?
                .sharing_gpu(sharing)?
                .init(nranks, rank, &id, &config)
        })
        .collect::<Result<_, Error>>()
        .unwrap();
    let pending = still_pending!(pending);
    group.end().unwrap();
    let comms: Vec<_> = pending.into_iter().map(|p| p.wait(WAIT).unwrap()).collect();
    let version = comms[0].nccl_version();
    let streams: Vec<_> = comms.iter().map(|c| c.context().new_stream().unwrap()).collect();
    let requirements = Requirements::new().lsa_barriers(4);

    // Outside a group: each call returns at once with a Pending; the collective setups complete together.
    let devs: Vec<_> = comms.iter().map(|c| c.dev_comm::<Lsa>(&requirements).unwrap()).collect();
    let devs: Vec<_> = devs.into_iter().map(|d| d.wait(WAIT).unwrap()).collect();
    let windows: Vec<_> = comms
        .iter()
        .zip(&streams)
        .map(|(c, s)| c.alloc_window::<f32>(s, LEN, WindowFlags::COLL_SYMMETRIC).unwrap())
        .collect();
    let windows: Vec<_> = windows.into_iter().map(|w| w.wait(WAIT).unwrap()).collect();
    for (dev, window) in devs.iter().zip(&windows) {
        check_written(dev, window, version);
    }

    // In a group: pending until the group ended and NCCL reports completion.
    let group = Group::start().unwrap();
    let grouped_devs: Vec<_> = comms.iter().map(|c| c.dev_comm_in::<Lsa>(&group, &requirements).unwrap()).collect();
    let grouped_windows: Vec<_> = comms
        .iter()
        .zip(&streams)
        .map(|(c, s)| c.window_in(&group, DeviceBuffer::<f32>::new(s, LEN).unwrap(), WindowFlags::COLL_SYMMETRIC))
        .collect::<Result<_, _>>()
        .unwrap();
    let (grouped_devs, grouped_windows) = (still_pending!(grouped_devs), still_pending!(grouped_windows));
    let in_progress = group.end().unwrap();
    println!("non-blocking group end reported in progress: {in_progress}");
    let grouped_devs: Vec<_> = grouped_devs.into_iter().map(|d| d.wait(WAIT).unwrap()).collect();
    let grouped_windows: Vec<_> = grouped_windows.into_iter().map(|w| w.wait(WAIT).unwrap()).collect();
    for (dev, window) in grouped_devs.iter().zip(&grouped_windows) {
        check_written(dev, window, version);
    }
    println!("{nranks} rank(s), NCCL {version}: non-blocking device communicators and windows written");
    drop((grouped_devs, grouped_windows, devs, windows));
}
