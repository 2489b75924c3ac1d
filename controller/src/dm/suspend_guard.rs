//! Bounds how long a suspend may block. The kernel waits for a suspend's
//! in-flight I/O interruptibly (dm_suspend: a pending signal ends the wait
//! with EINTR, and the kernel undoes the suspend). A guard armed around the
//! ioctl is a POSIX timer that signals the calling thread once the limit
//! has passed, again every 50 ms until the ioctl returns; the signal's
//! handler only notes that it fired and is installed without SA_RESTART,
//! so the ioctl fails instead of resuming. A timer rather than a watcher
//! thread: a timer is three syscalls, where a thread started and joined
//! around every reload costs far more on a daemon reloading many maps.
use std::{
    sync::{
        Once,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

/// The signal used: not one the daemon's runtime or a user sends.
fn signal() -> libc::c_int {
    libc::SIGRTMIN() + 4
}

/// Sets the flag the timer's signal carries (the armed guard's own).
extern "C" fn fired(_: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel hands a valid siginfo; this signal comes only from
    // a guard's timer, whose value points at that guard's flag, alive
    // until the timer is deleted (and a signal it raised is delivered
    // before the deleting syscall returns: it targets this very thread).
    unsafe {
        let flag = (*info).si_value().sival_ptr as *const AtomicBool;
        if !flag.is_null() {
            (*flag).store(true, Ordering::SeqCst);
        }
    }
}

fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: a zeroed sigaction with a handler that only stores to an
        // atomic (async-signal-safe), SA_SIGINFO and no SA_RESTART.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = fired
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(signal(), &sa, std::ptr::null_mut());
        }
    });
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

pub struct Guard {
    /// Boxed: the timer's signal carries its address.
    fired: Box<AtomicBool>,
    /// None when the timer could not be made: the call is then unbounded,
    /// as a suspend is without a guard.
    timer: Option<libc::timer_t>,
}

impl Guard {
    /// Arms a guard for the calling thread.
    pub fn arm(limit: Duration) -> Guard {
        install_handler();
        let fired = Box::new(AtomicBool::new(false));
        // SAFETY: a zeroed sigevent filled in for SIGEV_THREAD_ID (this
        // thread's kernel id), carrying the flag's address, which the box
        // keeps in place until `finish` deletes the timer.
        let timer = unsafe {
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = signal();
            ev.sigev_notify_thread_id = libc::gettid();
            ev.sigev_value = libc::sigval {
                sival_ptr: &*fired as *const AtomicBool as *mut libc::c_void,
            };
            let mut t: libc::timer_t = std::mem::zeroed();
            let spec = libc::itimerspec {
                // Zero would disarm it: the least limit is a nanosecond.
                it_value: timespec(limit.max(Duration::from_nanos(1))),
                it_interval: timespec(Duration::from_millis(50)),
            };
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut t) != 0 {
                None
            } else if libc::timer_settime(t, 0, &spec, std::ptr::null_mut()) != 0 {
                libc::timer_delete(t);
                None
            } else {
                Some(t)
            }
        };
        Guard { fired, timer }
    }

    /// The guarded call returned: stops the timer; whether it had to
    /// interrupt the call.
    pub fn disarm(mut self) -> bool {
        self.finish();
        self.fired.load(Ordering::SeqCst)
    }

    fn finish(&mut self) {
        if let Some(t) = self.timer.take() {
            // SAFETY: a timer this guard created and has not deleted.
            unsafe { libc::timer_delete(t) };
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

    /// A blocking read of a pipe nobody writes to, standing in for the
    /// suspend's interruptible wait: its result and errno. Should no
    /// guard interrupt it, a byte arrives after `backstop` and the test
    /// fails on the result instead of hanging.
    fn blocked_read(backstop: Duration) -> (isize, Option<i32>) {
        let mut fds = [0; 2];
        // SAFETY: a valid two-element array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let wr = fds[1];
        let writer = std::thread::spawn(move || {
            if wait.recv_timeout(backstop).is_err() {
                // SAFETY: one byte from a static buffer to the pipe, whose
                // fds stay open until this thread is joined.
                unsafe { libc::write(wr, b"x".as_ptr().cast(), 1) };
            }
        });
        let mut b = [0u8; 1];
        // SAFETY: reading into a valid one-byte buffer.
        let r = unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) };
        let err = std::io::Error::last_os_error().raw_os_error();
        let _ = done.send(());
        writer.join().unwrap();
        // SAFETY: closing the pipe's own fds, no longer used.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        (r, err)
    }

    #[test]
    fn a_blocking_call_past_the_limit_is_interrupted() {
        let t = Instant::now();
        let g = Guard::arm(Duration::from_millis(200));
        let (r, err) = blocked_read(Duration::from_secs(10));
        assert!(g.disarm());
        assert_eq!(r, -1);
        assert_eq!(err, Some(libc::EINTR));
        assert!(t.elapsed() >= Duration::from_millis(200));
    }

    #[test]
    fn an_unguarded_blocking_call_ends_at_the_backstop() {
        // The tests above fail, not hang, when no guard fires.
        assert_eq!(blocked_read(Duration::from_millis(50)).0, 1);
    }

    #[test]
    fn each_guard_signals_its_own_thread_only() {
        // A thread blocked past its short limit is interrupted; another,
        // guarded with a long one at the same time, is not.
        let patient = std::thread::spawn(|| {
            let g = Guard::arm(Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(400));
            g.disarm()
        });
        let g = Guard::arm(Duration::from_millis(100));
        let (r, _) = blocked_read(Duration::from_secs(10));
        assert!(g.disarm());
        assert_eq!(r, -1);
        assert!(!patient.join().unwrap(), "the other thread's guard fired");
        // A guard armed after one that fired starts unfired.
        let g = Guard::arm(Duration::from_secs(5));
        assert!(!g.disarm());
    }

    #[test]
    fn a_call_within_the_limit_is_left_alone() {
        let g = Guard::arm(Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(20));
        assert!(!g.disarm());
    }
}
