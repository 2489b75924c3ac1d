//! Path checkers: one thread per path reads one 4 KiB block with O_DIRECT
//! (as multipath-tools' directio checker does). A read, unlike a SCSI TEST
//! UNIT READY, goes through the path's data path, so a path whose commands
//! hang (an array that stopped answering, a link down without a reset) is
//! caught: the engine fails a path whose check has not answered within the
//! timeout, whatever the thread is still waiting for. Unless the device is
//! still completing commands: a path saturated at a low queue_depth keeps
//! the check waiting behind queued I/O, and failing it for that would take
//! a working path away under load.
use super::tur::{self, Tur};
use crate::policy::failback;
use crate::{
    discovery::alua::{AccessState, Alua},
    sysfs_attr::KeptFiles,
};
use std::{
    collections::HashMap,
    fs::File,
    io,
    os::{fd::AsRawFd, unix::fs::OpenOptionsExt},
    path::{Path, PathBuf},
    sync::mpsc::{self, Receiver, Sender},
    time::{Duration, Instant},
};

/// The checker's view of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Ready,
    Faulty,
    /// The check did not answer in time.
    Timeout,
    /// No check has finished yet.
    Unknown,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ready => "ready",
            Verdict::Faulty => "faulty",
            Verdict::Timeout => "timeout",
            Verdict::Unknown => "checking",
        }
    }

    pub fn is_bad(self) -> bool {
        matches!(self, Verdict::Faulty | Verdict::Timeout)
    }
}

/// One finished check.
#[derive(Debug)]
pub struct Report {
    pub path: String,
    pub result: Result<(), String>,
    pub took: Duration,
    /// The path's ALUA access state as the check read it (`None`: not an
    /// ALUA path).
    pub alua: Option<AccessState>,
    /// The check rescanned a device that read as empty on a port that
    /// takes I/O.
    pub rescanned_empty: bool,
}

/// One path's checks, with what they keep open between them: the ALUA
/// attributes and the device itself (multipathd too keeps a path's fd for
/// the path's life): with a check each second on many paths, the opens
/// and closes would be most of the checkers' CPU. A check that fails
/// through a kept file is made again through files opened now, so a device
/// that went away and came back under the same name is judged as what it
/// is now: keeping saves only the opens of a check that succeeds.
pub struct Probe {
    name: String,
    sys: PathBuf,
    dev_node: PathBuf,
    attrs: KeptFiles<&'static str>,
    dev: Option<File>,
    /// The last check rescanned a device that read as empty.
    rescanned_empty: bool,
}

/// Why a read check failed: the device read as empty (0 bytes at offset
/// 0: no capacity), or another error.
struct ReadFailure {
    empty: bool,
    why: String,
}

impl Probe {
    pub fn new(name: &str) -> Self {
        Self::at(
            name,
            Path::new("/sys/class/block").join(name),
            Path::new("/dev").join(name),
        )
    }

    /// A probe of the device node `dev_node` whose sysfs directory is
    /// `sys`.
    fn at(name: &str, sys: PathBuf, dev_node: PathBuf) -> Self {
        Self {
            name: name.to_string(),
            sys,
            dev_node,
            attrs: KeptFiles::default(),
            dev: None,
            rescanned_empty: false,
        }
    }

    /// Reads one aligned block from the device, bypassing the page cache;
    /// with the path's ALUA state, read on the way (the daemon follows the
    /// array's port states from the checks rather than reading them
    /// again). An ALUA device is rescanned first where
    /// [`failback::rescan_port`] says the kernel's view of it is stale,
    /// once a check.
    pub fn check(&mut self) -> (Result<(), String>, Option<AccessState>) {
        let mut rescanned = false;
        self.rescanned_empty = false;
        loop {
            let alua = self.alua_state();
            let stale = |empty| alua.is_some_and(|s| failback::rescan_port(s, empty));
            if !rescanned && stale(false) {
                rescanned = Alua::rescan(&self.sys);
                if rescanned {
                    continue;
                }
            }
            let r = self.check_path(alua);
            match r {
                Err(f) if f.empty && !rescanned && stale(true) && Alua::rescan(&self.sys) => {
                    rescanned = true;
                    self.rescanned_empty = true;
                }
                r => return (r.map_err(|f| f.why), alua),
            }
        }
    }

    fn alua_state(&mut self) -> Option<AccessState> {
        let (sys, attrs) = (&self.sys, &mut self.attrs);
        Alua::state_from(&mut |f| attrs.read(f, || sys.join("device").join(f)).ok())
    }

    fn check_path(&mut self, alua: Option<AccessState>) -> Result<(), ReadFailure> {
        let dev = self.dev_node.display().to_string();
        let failed = |why: String| ReadFailure { empty: false, why };
        if alua == Some(AccessState::Standby) {
            // Reads fail on a standby port by design: ask the array instead.
            return match tur::test_unit_ready(&self.name, 30_000).map_err(failed)? {
                Tur::Ready | Tur::Standby => Ok(()),
                Tur::Down(why) => Err(failed(format!("{dev}: {why}"))),
            };
        }
        if let Some(f) = &self.dev {
            if read_aligned(f).is_ok() {
                return Ok(());
            }
            self.dev = None;
        }
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&self.dev_node)
            .map_err(|e| failed(format!("open {dev}: {e}")))?;
        read_aligned(&f).map_err(|e| ReadFailure {
            empty: e.kind() == io::ErrorKind::UnexpectedEof,
            why: format!("read {dev}: {e}"),
        })?;
        self.dev = Some(f);
        Ok(())
    }

    /// Whether the device is kept open (its last check read it well).
    pub fn keeps_device(&self) -> bool {
        self.dev.is_some()
    }

    /// Whether the last check rescanned a device that read as empty on a
    /// port that takes I/O.
    pub fn rescanned_empty(&self) -> bool {
        self.rescanned_empty
    }
}

fn read_aligned(f: &File) -> io::Result<()> {
    /// One block, aligned for O_DIRECT: on the stack, so a check neither
    /// allocates nor clears memory.
    #[repr(C, align(4096))]
    struct Block([u8; 4096]);
    let mut block = std::mem::MaybeUninit::<Block>::uninit();
    // SAFETY: the kernel writes at most size_of::<Block>() bytes into the
    // block, which nothing reads.
    let n = unsafe {
        libc::pread(
            f.as_raw_fd(),
            block.as_mut_ptr().cast(),
            std::mem::size_of::<Block>(),
            0,
        )
    };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "read returned nothing",
        )),
        _ => Ok(()),
    }
}

struct PathChecker {
    trigger: Sender<()>,
    /// Time between this path's checks: the interval, longer while the
    /// path stays healthy (see [`backoff`]).
    every: Duration,
    started: Option<Instant>,
    last_start: Option<Instant>,
    verdict: Verdict,
    /// When the check that gave `verdict` started.
    verdict_from: Option<Instant>,
    last_ms: Option<f64>,
    last_error: Option<String>,
    /// The ALUA state the last finished check read.
    alua: Option<AccessState>,
    /// The running check outlived the timeout behind a device that still
    /// answers (said once per check).
    queued_noted: bool,
    /// When the device last had commands outstanding, all younger than the
    /// timeout, while this check waited past it.
    answering_at: Option<Instant>,
    /// When the check started that read the path's port take I/O again
    /// after it refused it ([`failback::port_returned`]), until the engine
    /// sees the path serve.
    returned: Option<Instant>,
}

/// The checkers of every path, driven by the engine's ticks.
pub struct Checkers {
    interval: Duration,
    max_interval: Duration,
    timeout: Duration,
    paths: HashMap<String, PathChecker>,
    reports_tx: Sender<Report>,
    reports: Receiver<Report>,
}

/// A verdict change, for the engine to act on.
#[derive(Debug, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub from: Verdict,
    pub to: Verdict,
    pub detail: Option<String>,
}

/// The time to the next check of a path checked `every` apart: doubled
/// after a check that found it as healthy as before (same ALUA state), up
/// to `max`; back to `interval` after anything else. multipathd does the
/// same (polling_interval up to max_polling_interval): on many paths the
/// checks of healthy ones would otherwise be a large share of the
/// daemon's CPU.
pub fn backoff(every: Duration, interval: Duration, max: Duration, steady: bool) -> Duration {
    if steady {
        (every * 2).clamp(interval, max.max(interval))
    } else {
        interval
    }
}

impl Checkers {
    /// Paths are checked every `interval`, healthy ones less often up to
    /// every `max_interval`.
    pub fn new(interval: Duration, max_interval: Duration, timeout: Duration) -> Self {
        let (reports_tx, reports) = mpsc::channel();
        Checkers {
            interval,
            max_interval,
            timeout,
            paths: HashMap::new(),
            reports_tx,
            reports,
        }
    }

    pub fn set_timing(&mut self, interval: Duration, max_interval: Duration, timeout: Duration) {
        self.interval = interval;
        self.max_interval = max_interval;
        self.timeout = timeout;
        for p in self.paths.values_mut() {
            p.every = interval;
        }
    }

    /// Checks the path at the base interval again from now on: the kernel
    /// failed it, or something about it changed.
    pub fn hurry(&mut self, name: &str) {
        if let Some(p) = self.paths.get_mut(name) {
            p.every = self.interval;
        }
    }

    /// The time between the path's checks now.
    pub fn every(&self, name: &str) -> Option<Duration> {
        self.paths.get(name).map(|p| p.every)
    }

    /// Starts checking a path (no-op if already checked).
    pub fn add(&mut self, name: &str) {
        if self.paths.contains_key(name) {
            return;
        }
        let (trigger, rx) = mpsc::channel::<()>();
        let tx = self.reports_tx.clone();
        let path = name.to_string();
        let spawned = std::thread::Builder::new()
            .name(format!("check-{name}"))
            .spawn(move || {
                let mut probe = Probe::new(&path);
                // Ends when the engine drops the trigger (path removed).
                while rx.recv().is_ok() {
                    let t = Instant::now();
                    let (result, alua) = probe.check();
                    let r = Report {
                        path: path.clone(),
                        result,
                        took: t.elapsed(),
                        alua,
                        rescanned_empty: probe.rescanned_empty(),
                    };
                    if tx.send(r).is_err() {
                        break;
                    }
                }
            });
        if spawned.is_err() {
            return;
        }
        self.paths.insert(
            name.to_string(),
            PathChecker {
                trigger,
                every: self.interval,
                started: None,
                last_start: None,
                verdict: Verdict::Unknown,
                verdict_from: None,
                last_ms: None,
                last_error: None,
                alua: None,
                queued_noted: false,
                answering_at: None,
                returned: None,
            },
        );
    }

    /// Stops checking a path. A check stuck in the kernel keeps its thread
    /// until the read returns; nothing waits for it.
    pub fn remove(&mut self, name: &str) {
        self.paths.remove(name);
    }

    pub fn verdict(&self, name: &str) -> Verdict {
        self.paths.get(name).map_or(Verdict::Unknown, |p| p.verdict)
    }

    /// Whether the path checked ready in a check that started after `t`
    /// (a failure the kernel saw at `t` is not undone by an older check).
    pub fn ready_since(&self, name: &str, t: Option<Instant>) -> bool {
        self.paths.get(name).is_some_and(|p| {
            p.verdict == Verdict::Ready
                && match (t, p.verdict_from) {
                    (None, _) => true,
                    (Some(t), Some(from)) => from >= t,
                    (Some(_), None) => false,
                }
        })
    }

    /// The path's ALUA access state as its last finished check read it.
    pub fn alua(&self, name: &str) -> Option<AccessState> {
        self.paths.get(name).and_then(|p| p.alua)
    }

    /// When the path's port returned (the start of the check that read it
    /// take I/O again), while the engine has not yet seen it serve.
    pub fn returned(&self, name: &str) -> Option<Instant> {
        self.paths.get(name).and_then(|p| p.returned)
    }

    /// The engine saw the returned path serve, or stops waiting for it.
    pub fn forget_return(&mut self, name: &str) {
        if let Some(p) = self.paths.get_mut(name) {
            p.returned = None;
        }
    }

    pub fn last_ms(&self, name: &str) -> Option<f64> {
        self.paths.get(name).and_then(|p| p.last_ms)
    }

    /// Starts due checks, collects reports, times out silent ones; returns
    /// the verdict changes and notes for the log. `silent` tells how long
    /// a path's device has completed nothing with commands outstanding (None:
    /// nothing in flight, or not known): a check past its timeout fails the
    /// path only if the device itself is not answering.
    pub fn tick(
        &mut self,
        now: Instant,
        silent: &mut dyn FnMut(&str) -> Option<Duration>,
    ) -> (Vec<Change>, Vec<String>) {
        let mut changes = vec![];
        let mut notes = vec![];
        while let Ok(r) = self.reports.try_recv() {
            let Some(p) = self.paths.get_mut(&r.path) else {
                continue;
            };
            p.verdict_from = p.started;
            p.started = None;
            p.queued_noted = false;
            p.answering_at = None;
            p.last_ms = Some(r.took.as_secs_f64() * 1000.0);
            if r.rescanned_empty {
                notes.push(format!(
                    "path {}: the device read as empty on a port that takes I/O: rescanned, \
                     so its capacity is read again ({})",
                    r.path,
                    if r.result.is_ok() {
                        "it reads now"
                    } else {
                        "it still does not read"
                    }
                ));
            }
            let (to, detail) = match r.result {
                Ok(()) => (Verdict::Ready, None),
                Err(e) => (Verdict::Faulty, Some(e)),
            };
            let steady = to == Verdict::Ready && p.verdict == Verdict::Ready && p.alua == r.alua;
            p.every = backoff(p.every, self.interval, self.max_interval, steady);
            if failback::port_returned(p.alua, r.alua) {
                p.returned = p.verdict_from;
            } else if r.alua.is_some_and(AccessState::refuses_io) {
                p.returned = None;
            }
            p.alua = r.alua;
            p.last_error = detail.clone();
            if to != p.verdict {
                changes.push(Change {
                    path: r.path.clone(),
                    from: p.verdict,
                    to,
                    detail,
                });
                p.verdict = to;
            }
        }
        for (name, p) in self.paths.iter_mut() {
            match p.started {
                Some(s) if now.duration_since(s) >= self.timeout => {
                    if p.verdict == Verdict::Timeout {
                        continue;
                    }
                    let waited = now.duration_since(s).as_secs_f64();
                    let detail = match silent(name) {
                        Some(a) if a >= self.timeout => format!(
                            "no answer to a 4 KiB read in {waited:.1} s; the device has \
                             completed nothing for {:.1} s with commands outstanding",
                            a.as_secs_f64()
                        ),
                        Some(a) => {
                            p.answering_at = Some(now);
                            if !p.queued_noted {
                                p.queued_noted = true;
                                notes.push(format!(
                                    "path {name}: check waiting {waited:.1} s behind queued I/O; \
                                     the device is answering (last completion {:.0} ms ago): not failed",
                                    a.as_secs_f64() * 1000.0
                                ));
                            }
                            continue;
                        }
                        // Nothing outstanding: between two bursts of a busy
                        // path, or a queue that dispatches nothing. Only
                        // the second lasts: fail once the device has not
                        // been seen answering for another timeout.
                        None => {
                            let since = p.answering_at.unwrap_or(s + self.timeout);
                            if now.duration_since(since) < self.timeout {
                                continue;
                            }
                            format!(
                                "no answer to a 4 KiB read in {waited:.1} s, and nothing \
                                 outstanding on the device"
                            )
                        }
                    };
                    p.verdict_from = Some(s);
                    p.every = self.interval;
                    changes.push(Change {
                        path: name.clone(),
                        from: p.verdict,
                        to: Verdict::Timeout,
                        detail: Some(detail),
                    });
                    p.verdict = Verdict::Timeout;
                }
                Some(_) => {}
                None => {
                    if p.last_start
                        .is_none_or(|l| now.duration_since(l) >= p.every)
                        && p.trigger.send(()).is_ok()
                    {
                        p.started = Some(now);
                        p.last_start = Some(now);
                    }
                }
            }
        }
        changes.sort_by(|a, b| a.path.cmp(&b.path));
        (changes, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_device_is_faulty_with_the_reason() {
        let (r, alua) = Probe::new("pathpilot-no-such-disk").check();
        assert_eq!(alua, None);
        let e = r.unwrap_err();
        assert!(e.contains("/dev/pathpilot-no-such-disk"), "{e}");
    }

    #[test]
    fn a_probe_keeps_a_device_that_reads_and_judges_a_replaced_one_afresh() {
        // A file reached through /dev/.. stands for the device node.
        let dir = std::env::temp_dir().join(format!("pp-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let node = dir.join("node");
        std::fs::write(&node, [7u8; 4096]).unwrap();
        let mut p = Probe::new(&format!("..{}", node.display()));
        assert_eq!(p.check(), (Ok(()), None));
        assert!(p.keeps_device());
        // Emptied: the kept file reads nothing, and so does the node
        // opened again; the check fails and keeps nothing.
        std::fs::write(&node, []).unwrap();
        let e = p.check().0.unwrap_err();
        assert!(e.contains("read returned nothing"), "{e}");
        assert!(!p.keeps_device());
        std::fs::write(&node, [7u8; 4096]).unwrap();
        assert_eq!(p.check().0, Ok(()));
        // A new device under the same name while the old one, still kept,
        // no longer reads: judged by the new one.
        std::fs::write(&node, []).unwrap();
        let new = dir.join("new");
        std::fs::write(&new, [7u8; 4096]).unwrap();
        std::fs::rename(&new, &node).unwrap();
        assert_eq!(p.check().0, Ok(()));
        assert!(p.keeps_device());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_alua_port_is_rescanned_while_it_refuses_io_or_its_device_reads_empty() {
        // A directory stands for the device's sysfs, a file for its node.
        let dir = std::env::temp_dir().join(format!("pp-probe-alua-{}", std::process::id()));
        let (sys, node) = (dir.join("sys"), dir.join("node"));
        std::fs::create_dir_all(sys.join("device")).unwrap();
        let attr = |f: &str, v: &str| std::fs::write(sys.join("device").join(f), v).unwrap();
        let rescanned = || std::fs::remove_file(sys.join("device/rescan")).is_ok();
        let mut p = Probe::at("node", sys.clone(), node.clone());
        attr("dh_state", "alua\n");
        attr("access_state", "active/optimized\n");
        std::fs::write(&node, [7u8; 4096]).unwrap();
        assert_eq!(p.check(), (Ok(()), Some(AccessState::Optimized)));
        assert!(!rescanned(), "a usable port whose device reads");
        // The port came back while the capacity still reads 0: rescanned
        // once, then judged (here the node stays empty).
        std::fs::write(&node, []).unwrap();
        let (r, st) = p.check();
        assert!(r.unwrap_err().contains("read returned nothing"));
        assert_eq!(st, Some(AccessState::Optimized));
        assert!(rescanned(), "an empty device on a usable port");
        assert!(p.rescanned_empty());
        // A port that refuses I/O: asked before the read.
        std::fs::write(&node, [7u8; 4096]).unwrap();
        attr("access_state", "unavailable\n");
        assert_eq!(p.check(), (Ok(()), Some(AccessState::Unavailable)));
        assert!(rescanned(), "a port that refuses I/O");
        assert!(!p.rescanned_empty());
        // Not an ALUA path: never rescanned, however it reads.
        attr("dh_state", "detached\n");
        std::fs::write(&node, []).unwrap();
        let (r, st) = p.check();
        assert!(r.is_err());
        assert_eq!(st, None);
        assert!(!rescanned(), "not an ALUA path");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checkers_report_changes_once() {
        let mut c = Checkers::new(
            Duration::from_millis(10),
            Duration::from_millis(80),
            Duration::from_secs(5),
        );
        c.add("pathpilot-no-such-disk");
        let t0 = Instant::now();
        let mut seen = vec![];
        while t0.elapsed() < Duration::from_secs(2) && seen.is_empty() {
            seen = c.tick(Instant::now(), &mut |_| None).0;
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0].to, Verdict::Faulty);
        // Repeated failures are not new changes.
        std::thread::sleep(Duration::from_millis(50));
        assert!(c.tick(Instant::now(), &mut |_| None).0.is_empty());
        assert!(
            c.tick(Instant::now() + Duration::from_millis(100), &mut |_| None)
                .0
                .is_empty()
        );
        assert_eq!(c.verdict("pathpilot-no-such-disk"), Verdict::Faulty);
        // A failing path is checked at the interval, never backed off.
        assert_eq!(
            c.every("pathpilot-no-such-disk"),
            Some(Duration::from_millis(10))
        );
    }

    #[test]
    fn a_real_disk_that_reads_well_is_checked_less_often() {
        // A loop device stands for a healthy path.
        let Some(lo) = crate::test_loop::TestLoop::attach("checker") else {
            return;
        };
        let (dev, name) = (lo.dev.clone(), lo.name().to_string());
        let (i, max) = (Duration::from_millis(10), Duration::from_millis(80));
        let mut c = Checkers::new(i, max, Duration::from_secs(5));
        c.add(&name);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(10) && c.every(&name) != Some(max) {
            c.tick(Instant::now(), &mut |_| None);
            std::thread::sleep(Duration::from_millis(5));
        }
        let (every, verdict) = (c.every(&name), c.verdict(&name));
        c.hurry(&name);
        let hurried = c.every(&name);
        drop(lo);
        assert_eq!(verdict, Verdict::Ready, "{dev}");
        assert_eq!(every, Some(max), "{dev} read well: checked every {max:?}");
        assert_eq!(hurried, Some(i), "hurried: back to the interval");
    }

    #[test]
    fn healthy_paths_are_checked_less_often_up_to_the_maximum() {
        let (i, max) = (Duration::from_secs(1), Duration::from_secs(4));
        let mut every = i;
        let mut seen = vec![];
        for _ in 0..4 {
            every = backoff(every, i, max, true);
            seen.push(every.as_secs());
        }
        assert_eq!(seen, vec![2, 4, 4, 4]);
        assert_eq!(backoff(every, i, max, false), i, "anything else: at once");
        // A maximum below the interval (or equal) means no back-off.
        assert_eq!(backoff(i, i, Duration::from_millis(10), true), i);
        assert_eq!(backoff(i, i, i, true), i);
    }

    /// A check that never answers: the checker thread blocks opening a
    /// FIFO nobody writes to (reached through /dev/..). Returns the name to
    /// check and the FIFO, to release the thread with a writer at the end.
    fn hanging_check() -> (String, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "pathpilot-checker-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        (format!("..{}", fifo.display()), fifo)
    }

    fn release(fifo: &std::path::Path) {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(fifo);
        let _ = std::fs::remove_dir_all(fifo.parent().unwrap());
    }

    /// Ticks for `d` with `silent` as the device's silence.
    fn run_for(
        c: &mut Checkers,
        d: Duration,
        silent: Option<Duration>,
    ) -> (Vec<Change>, Vec<String>) {
        let (mut changes, mut notes) = (vec![], vec![]);
        let t0 = Instant::now();
        while t0.elapsed() < d {
            let (ch, n) = c.tick(Instant::now(), &mut |_| silent);
            changes.extend(ch);
            notes.extend(n);
            std::thread::sleep(Duration::from_millis(10));
        }
        (changes, notes)
    }

    #[test]
    fn a_check_queued_behind_a_device_that_answers_does_not_fail_the_path() {
        let (name, fifo) = hanging_check();
        let mut c = Checkers::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
            Duration::from_millis(100),
        );
        c.add(&name);
        let (changes, notes) = run_for(
            &mut c,
            Duration::from_millis(400),
            Some(Duration::from_millis(12)),
        );
        release(&fifo);
        assert!(changes.is_empty(), "{changes:?}");
        assert_eq!(notes.len(), 1, "said once per check: {notes:?}");
        assert!(
            notes[0].contains("the device is answering (last completion 12 ms ago)"),
            "{notes:?}"
        );
        assert_ne!(c.verdict(&name), Verdict::Timeout);
    }

    #[test]
    fn a_check_past_its_timeout_fails_a_device_that_does_not_answer() {
        for (silent, says) in [
            (None, "no answer to a 4 KiB read in"),
            (
                Some(Duration::from_secs(4)),
                "completed nothing for 4.0 s with commands outstanding",
            ),
        ] {
            let (name, fifo) = hanging_check();
            let mut c = Checkers::new(
                Duration::from_millis(10),
                Duration::from_millis(10),
                Duration::from_millis(100),
            );
            c.add(&name);
            let (changes, notes) = run_for(&mut c, Duration::from_millis(400), silent);
            release(&fifo);
            assert!(notes.is_empty(), "{notes:?}");
            assert_eq!(changes.len(), 1, "{changes:?}");
            assert_eq!(changes[0].to, Verdict::Timeout);
            let detail = changes[0].detail.as_deref().unwrap_or("");
            assert!(detail.contains(says), "{detail}");
            assert_eq!(c.verdict(&name), Verdict::Timeout);
        }
    }

    #[test]
    fn a_busy_device_seen_idle_between_bursts_is_not_failed() {
        let (name, fifo) = hanging_check();
        let mut c = Checkers::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
            Duration::from_millis(100),
        );
        c.add(&name);
        let (mut changes, mut n) = (vec![], 0u32);
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(600) {
            // Commands outstanding every other tick, none in between.
            n += 1;
            let age = (n % 2 == 0).then_some(Duration::from_millis(5));
            changes.extend(c.tick(Instant::now(), &mut |_| age).0);
            std::thread::sleep(Duration::from_millis(10));
        }
        release(&fifo);
        assert!(changes.is_empty(), "{changes:?}");
    }
}
