//! Soft mode's words in the host's limits file (issue 34): a worker's
//! compute request per device (0..=100, never above its hard limit there,
//! may be set again) and its priority (1..=100, 50 when never set). A
//! refused call changes nothing; removing the worker forgets both. One
//! test function: the state directory is process-wide.

use accel_common::shm;

fn entry(worker: &str, uuid: &str) -> Option<shm::LimitEntry> {
    shm::limits()
        .unwrap()
        .into_iter()
        .find(|e| e.worker == worker && e.device_uuid == uuid)
}

#[test]
fn requests_and_priorities_are_kept_checked_and_forgotten() {
    let dir = std::env::temp_dir().join(format!("accel-soft-mode-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("ACCELERATOR_STATE_DIR", &dir);

    // A request alone names the worker; its priority is the default.
    shm::set_compute_request("w1", "dev-a", 40).unwrap();
    let e = entry("w1", "dev-a").unwrap();
    assert_eq!((e.compute_request, e.compute_percent), (Some(40), None));
    assert_eq!(e.priority, shm::DEFAULT_PRIORITY);
    shm::set_worker_priority("w1", 90).unwrap();
    assert_eq!(entry("w1", "dev-a").unwrap().priority, 90);

    // Refused: out of range, a limit below the request, a request above
    // the limit. Nothing changes.
    assert!(shm::set_compute_request("w1", "dev-a", 101).is_err());
    assert!(shm::set_worker_priority("w1", 0).is_err());
    assert!(shm::set_worker_priority("w1", 101).is_err());
    assert!(shm::set_compute_limit("w1", "dev-a", 30).is_err());
    let e = entry("w1", "dev-a").unwrap();
    assert_eq!(
        (e.compute_request, e.compute_percent, e.priority),
        (Some(40), None, 90)
    );
    shm::set_compute_limit("w1", "dev-a", 60).unwrap();
    assert!(shm::set_compute_request("w1", "dev-a", 61).is_err());
    assert_eq!(entry("w1", "dev-a").unwrap().compute_request, Some(40));
    shm::set_compute_request("w1", "dev-a", 60).unwrap();
    shm::set_compute_request("w1", "dev-a", 0).unwrap();
    let e = entry("w1", "dev-a").unwrap();
    assert_eq!((e.compute_request, e.compute_percent), (None, Some(60)));
    // A refused first call names nothing.
    assert!(shm::set_compute_request("w2", "dev-a", 101).is_err());
    assert!(shm::set_worker_priority("w2", 101).is_err());
    assert!(matches!(
        shm::remove_worker("w2"),
        Err(accel_common::Error::NotFound(_))
    ));

    // Removed: a new worker of the same id starts best-effort at 50.
    shm::set_compute_request("w1", "dev-a", 50).unwrap();
    shm::remove_worker("w1").unwrap();
    shm::set_compute_limit("w1", "dev-a", 20).unwrap();
    let e = entry("w1", "dev-a").unwrap();
    assert_eq!(
        (e.compute_request, e.compute_percent, e.priority),
        (None, Some(20), shm::DEFAULT_PRIORITY)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
