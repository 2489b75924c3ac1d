//! Hotplug from the kernel's uevents (the netlink socket udevd itself
//! listens on), so paths are rediscovered when a disk comes or goes rather
//! than by a full sysfs scan every interval: at 64 paths that scan was
//! most of the daemon's CPU.
use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
};

/// One kernel uevent, the parts discovery cares about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uevent {
    /// `add`, `remove`, `change`, `move`, `online`, `offline`, ...
    pub action: String,
    pub subsystem: String,
    /// Kernel name (`sdb`), when the device has a node.
    pub devname: Option<String>,
}

impl Uevent {
    /// Parses a kernel uevent datagram: `ACTION@DEVPATH`, then `KEY=VALUE`
    /// fields, NUL-separated. `None` for anything else (udevd's own
    /// "libudev" messages go to another multicast group and never reach a
    /// kernel-group socket, but a short or foreign datagram is ignored).
    pub fn parse(buf: &[u8]) -> Option<Uevent> {
        let mut fields = buf.split(|b| *b == 0).map(String::from_utf8_lossy);
        let head = fields.next()?;
        let (action, _) = head.split_once('@')?;
        let mut ev = Uevent {
            action: action.to_string(),
            subsystem: String::new(),
            devname: None,
        };
        for f in fields {
            match f.split_once('=') {
                Some(("SUBSYSTEM", v)) => ev.subsystem = v.to_string(),
                Some(("DEVNAME", v)) => ev.devname = Some(v.to_string()),
                Some(("ACTION", v)) => ev.action = v.to_string(),
                _ => {}
            }
        }
        Some(ev)
    }

    /// Whether the event can change the set of paths: a block device that
    /// could be a path came, went or changed. Device-mapper devices are
    /// never paths, and every map reload sends a `change` for its dm
    /// device: those would rescan after each of the daemon's own reloads.
    pub fn touches_paths(&self) -> bool {
        self.subsystem == "block"
            && !self
                .devname
                .as_deref()
                .is_some_and(|n| n.starts_with("dm-"))
    }

    /// The device-mapper device (`dm-3`) whose table was swapped or that
    /// was resumed: the kernel sends a `change` on every resume.
    pub fn dm_change(&self) -> Option<&str> {
        let n = self.devname.as_deref()?;
        (self.subsystem == "block" && self.action == "change" && n.starts_with("dm-")).then_some(n)
    }
}

/// What arrived since the last drain.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drained {
    /// Events that touch paths (see [`Uevent::touches_paths`]).
    pub path_events: usize,
    /// The socket's buffer overflowed: events were lost, scan everything.
    pub lost: bool,
    /// Device-mapper devices changed (see [`Uevent::dm_change`]), each
    /// named once.
    pub dm_changed: Vec<String>,
}

/// A non-blocking subscription to the kernel's uevents.
pub struct UeventMonitor {
    fd: OwnedFd,
}

/// The kernel's uevent multicast group (udevd re-broadcasts on group 2).
const KERNEL_GROUP: u32 = 1;

impl UeventMonitor {
    /// Subscribes; fails where netlink uevents are not available (some
    /// containers), and the caller falls back to scanning.
    pub fn open() -> io::Result<UeventMonitor> {
        // SAFETY: plain socket(2); the fd is owned at once.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_KOBJECT_UEVENT,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a fresh, valid descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: zeroed sockaddr_nl is valid; filled below.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = KERNEL_GROUP;
        // SAFETY: addr is a valid sockaddr_nl of the size given.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_nl).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // A burst (an array presenting hundreds of LUNs) must not overflow
        // between two drains; as root the limit can be raised.
        let size: libc::c_int = 4 << 20;
        // SAFETY: a valid int option of the size given; failure is harmless.
        unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(UeventMonitor { fd })
    }

    /// Reads every pending event without blocking.
    pub fn drain(&self) -> Drained {
        let mut out = Drained::default();
        // On the stack and not zeroed: the engine drains every tick (five
        // times a second), mostly finding nothing, so an allocation and a
        // clear of 8 KiB each time would be most of the drain's cost. Only
        // what the kernel wrote is read.
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                match io::Error::last_os_error().raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => {
                        out.lost = true;
                        continue;
                    }
                    // EAGAIN: drained; anything else: nothing more to read.
                    _ => return out,
                }
            }
            // SAFETY: recv wrote n bytes (at most the buffer's length).
            let got = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n as usize) };
            let Some(e) = Uevent::parse(got) else {
                continue;
            };
            if e.touches_paths() {
                out.path_events += 1;
            }
            if let Some(dm) = e.dm_change()
                && !out.dm_changed.iter().any(|d| d == dm)
            {
                out.dm_changed.push(dm.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dgram(fields: &[&str]) -> Vec<u8> {
        fields.join("\0").into_bytes()
    }

    #[test]
    fn kernel_events_parse_and_only_path_devices_count() {
        let add = dgram(&[
            "add@/devices/platform/host3/target3:0:1/3:0:1:0/block/sdq",
            "ACTION=add",
            "DEVPATH=/devices/platform/host3/target3:0:1/3:0:1:0/block/sdq",
            "SUBSYSTEM=block",
            "MAJOR=65",
            "MINOR=0",
            "DEVNAME=sdq",
            "DEVTYPE=disk",
            "SEQNUM=2231",
        ]);
        let e = Uevent::parse(&add).unwrap();
        assert_eq!(
            e,
            Uevent {
                action: "add".into(),
                subsystem: "block".into(),
                devname: Some("sdq".into())
            }
        );
        assert!(e.touches_paths());
        // A map reload's change on its dm device is not a path event.
        let dm = dgram(&[
            "change@/devices/virtual/block/dm-3",
            "ACTION=change",
            "SUBSYSTEM=block",
            "DEVNAME=dm-3",
        ]);
        let dm = Uevent::parse(&dm).unwrap();
        assert!(!dm.touches_paths());
        assert_eq!(dm.dm_change(), Some("dm-3"));
        assert_eq!(e.dm_change(), None, "a disk is no map");
        let scsi = dgram(&[
            "change@/devices/platform/host3/target3:0:1/3:0:1:0",
            "ACTION=change",
            "SUBSYSTEM=scsi",
            "SDEV_UA=ASYMMETRIC_ACCESS_STATE_CHANGED",
        ]);
        let scsi = Uevent::parse(&scsi).unwrap();
        assert!(!scsi.touches_paths());
        assert_eq!(scsi.dm_change(), None);
        assert_eq!(Uevent::parse(b"libudev\0\xfe\xed"), None);
        assert_eq!(Uevent::parse(b""), None);
    }

    #[test]
    fn a_loop_device_coming_and_going_is_seen() {
        // The host has loop devices and no dm.
        let mon = UeventMonitor::open().expect("netlink uevent socket");
        let _ = mon.drain();
        let Some(lo) = crate::test_loop::TestLoop::attach("uevent") else {
            return;
        };
        let dev = lo.dev.clone();
        assert!(lo.detach(), "losetup -d {dev}");
        // The kernel sends the events synchronously with the changes.
        let mut seen = Drained::default();
        for _ in 0..50 {
            let d = mon.drain();
            seen.path_events += d.path_events;
            seen.lost |= d.lost;
            if seen.path_events >= 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            seen.path_events >= 2,
            "attach and detach of {dev}: {seen:?}"
        );
    }
}
