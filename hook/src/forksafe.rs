//! Books behind one mutex that a `fork()` must not copy mid-update: the
//! fork handlers (`ffi`) hold the lock across `fork()`, release it in both
//! processes, and the child forgets the books (it holds none of its
//! parent's memory).

use parking_lot::{Mutex, MutexGuard};

pub struct ForkSafe<T>(Mutex<Option<T>>);

impl<T: Default> ForkSafe<T> {
    pub const fn new() -> Self {
        Self(Mutex::new(None))
    }

    /// Before `fork()`: hold the lock (the guard is forgotten).
    pub fn lock_for_fork(&self) {
        std::mem::forget(self.0.lock());
    }

    /// The lock, for the fork handlers to release after `fork()`.
    pub fn mutex(&self) -> &Mutex<Option<T>> {
        &self.0
    }

    /// In the child after `fork()`.
    pub fn forget(&self) {
        *self.0.lock() = None;
    }

    /// The books held (made on first use by [`books`]).
    pub fn lock(&self) -> MutexGuard<'_, Option<T>> {
        self.0.lock()
    }

    /// Run `f` on the books (made on first use).
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(books(&mut self.0.lock()))
    }
}

/// The books behind a held guard, made on first use.
pub fn books<T: Default>(guard: &mut Option<T>) -> &mut T {
    guard.get_or_insert_with(T::default)
}
