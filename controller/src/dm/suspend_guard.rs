//! Bounds how long a suspend may block. The kernel waits for a suspend's
//! in-flight I/O interruptibly (dm_suspend: a pending signal ends the wait
//! with EINTR, and the kernel undoes the suspend). A guard armed around the
//! ioctl signals the calling thread once the limit has passed, again every
//! 50 ms until the ioctl returns; the signal's handler does nothing and is
//! installed without SA_RESTART, so the ioctl fails instead of resuming.
use std::{
    sync::{
        Arc, Once,
        atomic::{AtomicBool, Ordering},
        mpsc,
    },
    thread::JoinHandle,
    time::Duration,
};

/// The signal used: not one the daemon's runtime or a user sends.
fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

extern "C" fn nothing(_: libc::c_int) {}

fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a handler that touches nothing
        // (async-signal-safe) and no SA_RESTART.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = nothing as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(signal(), &sa, std::ptr::null_mut());
        }
    });
}

pub struct Guard {
    fired: Arc<AtomicBool>,
    stop: Option<mpsc::Sender<()>>,
    watcher: Option<JoinHandle<()>>,
}

impl Guard {
    /// Arms a guard for the calling thread.
    pub fn arm(limit: Duration) -> Guard {
        install_handler();
        // SAFETY: the calling thread's own id, valid while it runs (it
        // waits for the watcher in disarm before going on).
        let me = unsafe { libc::pthread_self() };
        let fired = Arc::new(AtomicBool::new(false));
        let (stop, stopped) = mpsc::channel::<()>();
        let f = fired.clone();
        let watcher = std::thread::Builder::new()
            .name("suspend-guard".into())
            .spawn(move || {
                let mut wait = limit;
                // Until disarmed (or the guard dropped: disconnected).
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(wait) {
                    f.store(true, Ordering::SeqCst);
                    // SAFETY: `me` is alive: it joins this thread before
                    // it can exit.
                    unsafe { libc::pthread_kill(me, signal()) };
                    wait = Duration::from_millis(50);
                }
            })
            .ok();
        Guard {
            fired,
            stop: Some(stop),
            watcher,
        }
    }

    /// The guarded call returned: stops the watcher; whether it had to
    /// interrupt the call.
    pub fn disarm(mut self) -> bool {
        self.finish();
        self.fired.load(Ordering::SeqCst)
    }

    fn finish(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_blocking_call_past_the_limit_is_interrupted() {
        // A blocking read on a pipe nobody writes to stands in for the
        // suspend's interruptible wait.
        let mut fds = [0; 2];
        // SAFETY: a valid two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let t = Instant::now();
        let g = Guard::arm(Duration::from_millis(200));
        let mut b = [0u8; 1];
        // SAFETY: reading into a valid one-byte buffer.
        let r = unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
        let err = std::io::Error::last_os_error();
        assert!(g.disarm());
        assert_eq!(r, -1);
        assert_eq!(err.raw_os_error(), Some(libc::EINTR));
        assert!(t.elapsed() >= Duration::from_millis(200));
        // SAFETY: closing the pipe's own fds.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
    }

    #[test]
    fn a_call_within_the_limit_is_left_alone() {
        let g = Guard::arm(Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!g.disarm());
    }
}
