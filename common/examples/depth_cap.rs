//! `depth_cap WORKER DEVICE_UUID N`: cap the worker's queue on the device
//! at N launches per process (0: no cap), as the host's scheduler does
//! (`shm::set_depth_cap`), in `$ACCELERATOR_STATE_DIR`'s limits file. The
//! priority test (c-tests/hook/test_priority.c) checks the hook's gate
//! with it on caps the scheduler never sets (2, across threads) and on
//! work the scheduler does not see (graphs, a capture); its priority runs
//! leave the cap to the scheduler.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, worker, uuid, n] = args.as_slice() else {
        eprintln!("usage: depth_cap WORKER DEVICE_UUID N");
        std::process::exit(2);
    };
    let Ok(n) = n.parse::<u32>() else {
        eprintln!("depth_cap: N must be a number, not {n:?}");
        std::process::exit(2);
    };
    if let Err(e) = accel_common::shm::set_depth_cap(worker, uuid, n) {
        eprintln!("depth_cap: {e}");
        std::process::exit(1);
    }
}
