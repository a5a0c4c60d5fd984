//! Process-local locks that `fork()` cannot leave held in a child.
//!
//! A child of a multi-threaded process starts with the forking thread
//! alone: a lock another thread held at that instant stays held there for
//! good, and the child's first call that needs it blocks forever (ABI.md
//! promises every function works in a forked child). The vendors' caches
//! and serializing locks are therefore [`ForkMutex`]es, statics that a fork
//! handler of their vendor takes in the forking thread before `fork()`
//! ([`ForkMutex::hold`], outer locks first, the order the vendor's code
//! nests them) and lets go after it, in the parent and in the child
//! ([`release_held`]). The child so starts with every lock free and the
//! data behind each consistent: no thread was inside when it was copied.
//! A `std` mutex, not `parking_lot`'s: its unlock in the child is one
//! atomic store (and a futex wake), where parking_lot's may reach its
//! global parking table, which a thread of the parent may have held.

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Mutex, MutexGuard, PoisonError};
#[cfg(feature = "nvidia")]
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

pub(crate) struct ForkMutex<T>(Mutex<T>);

/// A read-write lock held for writing around `fork()` (the same way).
#[cfg(feature = "nvidia")]
pub(crate) struct ForkRwLock<T>(RwLock<T>);

thread_local! {
    /// The forking thread's holds, from its fork handler until after `fork()`.
    static HELD: RefCell<Vec<Box<dyn Any>>> = const { RefCell::new(Vec::new()) };
}

impl<T: Send + 'static> ForkMutex<T> {
    pub(crate) const fn new(t: T) -> ForkMutex<T> {
        ForkMutex(Mutex::new(t))
    }

    /// The lock (a panic while it was held left data that is still a
    /// valid `T`: a cache or a list, used as is).
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// In a fork handler: hold the lock in this thread until
    /// [`release_held`].
    pub(crate) fn hold(&'static self) {
        let g = self.lock();
        let _ = HELD.try_with(|h| h.borrow_mut().push(Box::new(g)));
    }
}

/// A lock serializing calls, not guarding data.
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
impl ForkMutex<()> {
    /// `f()` with the lock held.
    pub(crate) fn run<T>(&self, f: impl FnOnce() -> T) -> T {
        let _g = self.lock();
        f()
    }
}

/// The two locks of a vendor that drives a library it loaded, as statics
/// of the module it is invoked in, and the fork handler that holds them:
/// `DRIVER` serializes this process's calls into the library; `PARTITION`
/// a partition change (its check and its act, which call the library
/// inside it: taken first). `install_fork_handlers()` installs the handler
/// once (the vendor's `open`).
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
macro_rules! driver_locks {
    () => {
        use crate::fork_lock::ForkMutex;
        pub(crate) static DRIVER: ForkMutex<()> = ForkMutex::new(());
        pub(crate) static PARTITION: ForkMutex<()> = ForkMutex::new(());

        extern "C" fn hold_for_fork() {
            PARTITION.hold();
            DRIVER.hold();
        }

        pub(crate) fn install_fork_handlers() {
            static INSTALLED: std::sync::atomic::AtomicBool =
                std::sync::atomic::AtomicBool::new(false);
            crate::fork_lock::install(hold_for_fork, &INSTALLED);
        }
    };
}
#[cfg(any(feature = "ascend", feature = "amd", feature = "habana"))]
pub(crate) use driver_locks;

#[cfg(feature = "nvidia")]
impl<T: Send + Sync + 'static> ForkRwLock<T> {
    pub(crate) const fn new(t: T) -> ForkRwLock<T> {
        ForkRwLock(RwLock::new(t))
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, T> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        match self.0.try_write() {
            Ok(g) => Some(g),
            Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// In a fork handler: hold the lock for writing (every reader is out)
    /// in this thread until [`release_held`].
    pub(crate) fn hold(&'static self) {
        let g = self.write();
        let _ = HELD.try_with(|h| h.borrow_mut().push(Box::new(g)));
    }
}

/// After `fork()`, in the parent and in the child: let go of what the
/// forking thread holds, innermost first.
pub(crate) extern "C" fn release_held() {
    let _ = HELD.try_with(|h| {
        let mut h = h.borrow_mut();
        while h.pop().is_some() {}
    });
}

/// Install `prepare` (which holds a vendor's locks) once; `done` is that
/// vendor's flag. No `Once`: a fork while it ran would leave the child
/// blocked on it; two threads may both install, and holding a lock twice
/// in `prepare` cannot happen (the second handler waits for nothing the
/// first holds only if a lock is reentrant, so `prepare` takes each of its
/// locks once per call and the handlers run one after the other).
pub(crate) fn install(prepare: extern "C" fn(), done: &AtomicBool) {
    if !done.swap(true, AcqRel) {
        crate::abi::boundary::at_fork(prepare, release_held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static A: ForkMutex<Vec<u32>> = ForkMutex::new(Vec::new());

    #[test]
    fn a_held_lock_is_free_again_after_release() {
        A.hold();
        assert!(A.0.try_lock().is_err());
        release_held();
        A.lock().push(1);
        assert_eq!(*A.lock(), vec![1]);
    }
}
