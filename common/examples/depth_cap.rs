//! `depth_cap WORKER DEVICE_UUID N`: cap the worker's queue on the device
//! at N launches per process (0: no cap), as the host's scheduler does
//! (`shm::set_depth_cap`), in `$ACCELERATOR_STATE_DIR`'s limits file. The
//! compute cases' priority case sets it with this.

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
