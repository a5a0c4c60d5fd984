//! `grant WORKER DEVICE_UUID SHARE_BP DEPTH CHARGE_NS`: store in the
//! worker's row, in `$ACCELERATOR_STATE_DIR`'s limits file, the words the
//! host's sampler writes for a scheduled worker: its scheduler's grant
//! (`shm::grant_word`: SHARE_BP basis points of the device, its queue
//! capped at DEPTH launches, 0: none; `shm::set_granted`) and the launch
//! charge it measured (`shm::set_charge`, clamped to 1 µs .. one day).
//! `make hook-bench` measures a worker with a request and a priority with
//! it: the scheduler's own words, without a sampler deciding them from
//! what the bench's launches look like.

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, worker, uuid, share, depth, charge] = args.as_slice() else {
        eprintln!("usage: grant WORKER DEVICE_UUID SHARE_BP DEPTH CHARGE_NS");
        std::process::exit(2);
    };
    let (Ok(share), Ok(depth), Ok(charge)) = (share.parse(), depth.parse(), charge.parse()) else {
        eprintln!("grant: SHARE_BP, DEPTH and CHARGE_NS must be numbers");
        std::process::exit(2);
    };
    let word = accel_common::shm::grant_word(share, depth);
    let set = accel_common::shm::set_granted(worker, uuid, word)
        .and_then(|()| accel_common::shm::set_charge(worker, uuid, charge));
    if let Err(e) = set {
        eprintln!("grant: {e}");
        std::process::exit(1);
    }
}
