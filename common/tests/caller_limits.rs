//! `set_memory_limit_for_caller` / `set_compute_limit_for_caller` (the v2
//! ABI's hard limits, which name no worker), in processes of their own: a
//! process without `ACCELERATOR_WORKER_ID` is a worker of its own whose
//! limit binds it alone, one-time; with the variable, the limit is its
//! worker's. One test function: the state directory is process-wide.

use accel_common::shm;

/// Run `f` in a forked child; its exit status (0 = passed).
fn in_child(f: impl FnOnce() -> bool) -> i32 {
    // SAFETY: the child runs `f` and exits without returning to the harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(false);
        // SAFETY: leaves the child at once, without the harness's cleanup.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    status
}

fn me() -> i32 {
    std::process::id() as i32
}

#[test]
fn limits_set_by_the_caller_bind_its_worker_or_itself() {
    let dir = std::env::temp_dir().join(format!("accel-caller-limits-{}", me()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("ACCELERATOR_STATE_DIR", &dir);
    std::env::remove_var(shm::ENV_WORKER_ID);

    // Without a worker id: this process alone, one-time.
    shm::set_memory_limit_for_caller("dev-a", 1000).unwrap();
    shm::set_memory_limit_for_caller("dev-a", 1000).unwrap();
    assert!(shm::set_memory_limit_for_caller("dev-a", 2000).is_err());
    shm::set_compute_limit_for_caller("dev-a", 50).unwrap();
    assert!(shm::set_compute_limit_for_caller("dev-a", 60).is_err());
    assert!(shm::check_memory(me(), "dev-a", 1500).unwrap().should_block);
    assert!(!shm::check_memory(me(), "dev-a", 800).unwrap().should_block);
    let mine: Vec<_> = shm::limits()
        .unwrap()
        .into_iter()
        .filter(|e| e.device_uuid == "dev-a")
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].memory_bytes, Some(1000));
    assert_eq!(mine[0].compute_percent, Some(50));
    assert!(mine[0].worker.starts_with("process-"));

    // A forked child is another process: the parent's limit is not its.
    let child = in_child(|| {
        let pid = std::process::id() as i32;
        !shm::check_memory(pid, "dev-a", 1500).unwrap().should_block
            && shm::check_memory(pid, "dev-a", -1500).is_ok()
    });
    assert_eq!(child, 0, "a child is not bound by its parent's own limit");

    // A process that recorded memory first: its books were its private
    // worker's all along, so the limit counts what it holds.
    let child = in_child(|| {
        let pid = std::process::id() as i32;
        shm::check_memory(pid, "dev-b", 10).is_ok()
            && shm::set_memory_limit_for_caller("dev-b", 100).is_ok()
            && shm::check_memory(pid, "dev-b", 95).unwrap().should_block
            && !shm::check_memory(pid, "dev-b", 90).unwrap().should_block
    });
    assert_eq!(
        child, 0,
        "a limit set after allocating counts what the process holds"
    );

    // With a worker id: the worker's limit.
    let child = in_child(|| {
        std::env::set_var(shm::ENV_WORKER_ID, "w-caller");
        shm::set_memory_limit_for_caller("dev-c", 500).is_ok()
            && shm::limits().unwrap().iter().any(|e| {
                e.worker == "w-caller" && e.device_uuid == "dev-c" && e.memory_bytes == Some(500)
            })
    });
    assert_eq!(child, 0, "the limit of the caller's worker");
    let _ = std::fs::remove_dir_all(&dir);
}
