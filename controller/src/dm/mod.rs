//! Typed device-mapper ioctls for multipath maps, over the `devicemapper`
//! crate. This is the only module that talks to `/dev/mapper/control`;
//! callers pass and get the [`crate::mpath`] model, never table strings.
//!
//! No call here waits for udev: the crate only joins the udev cookie
//! protocol when `/run/udev/control` exists, and where udevd is absent (the
//! testbed) [`Dm::create`] makes the `/dev/mapper/<name>` node itself, as
//! libdevmapper's fallback does.
use std::{
    fmt,
    os::unix::fs::FileTypeExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use devicemapper::{DM, DevId, DeviceInfo, DmFlags, DmName, DmOptions, DmUuid};

use crate::{
    blockdev::DevNum,
    mpath::{MultipathStatus, MultipathTable, ParseError},
};

mod ioctl;
mod message;
pub mod multipathd;
pub mod readback;
mod suspend_guard;

pub use message::Message;

const CONTROL: &str = "/dev/mapper/control";
const MAPPER_DIR: &str = "/dev/mapper";

/// The ioctl an error came from, named as in `linux/dm-ioctl.h`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Version,
    List,
    Create,
    Load,
    ClearInactive,
    Suspend,
    Resume,
    Remove,
    Info,
    Table,
    Status,
    Message,
    Wait,
    Versions,
}

impl Op {
    pub fn ioctl(self) -> &'static str {
        match self {
            Op::Version => "DM_VERSION",
            Op::List => "DM_LIST_DEVICES",
            Op::Create => "DM_DEV_CREATE",
            Op::Load => "DM_TABLE_LOAD",
            Op::ClearInactive => "DM_TABLE_CLEAR",
            Op::Suspend => "DM_DEV_SUSPEND (suspend)",
            Op::Resume => "DM_DEV_SUSPEND (resume)",
            Op::Remove => "DM_DEV_REMOVE",
            Op::Info => "DM_DEV_STATUS",
            Op::Table => "DM_TABLE_STATUS (table)",
            Op::Status => "DM_TABLE_STATUS",
            Op::Message => "DM_TARGET_MSG",
            Op::Wait => "DM_DEV_ARM_POLL",
            Op::Versions => "DM_LIST_VERSIONS",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.ioctl())
    }
}

/// Why a device-mapper operation failed, with what it was done to.
#[derive(Debug, thiserror::Error)]
pub enum DmError {
    #[error("device-mapper is not available ({CONTROL}: {0}); is the dm_mod module loaded?")]
    Unavailable(String),
    #[error("{0} needs root (CAP_SYS_ADMIN)")]
    NotRoot(String),
    #[error("no map named '{0}'")]
    NoSuchMap(String),
    #[error("a device named '{0}' already exists")]
    Exists(String),
    #[error("'{0}' is not a valid map name (1-127 characters, no '/')")]
    BadName(String),
    #[error("map '{map}' is in use (open count {open_count}{}); not removing it", holders_note(.holders))]
    InUse {
        map: String,
        open_count: i32,
        holders: Vec<String>,
    },
    #[error("the kernel refused {op} on '{map}': {errno}{}", hint_note(.hint))]
    Kernel {
        op: Op,
        map: String,
        errno: Errno,
        hint: Option<String>,
    },
    #[error(
        "resume of '{map}' with the new table failed ({first}); {}",
        match .second { None => "resumed again with the old table".to_string(),
                        Some(e) => format!("resuming with the old table failed too ({e}): the map is SUSPENDED, I/O is queued") }
    )]
    ResumeFailed {
        map: String,
        first: Errno,
        second: Option<Errno>,
    },
    #[error(
        "suspending '{map}' for the reload did not finish within {:.1} s: I/O in flight on a \
         path is not completing (a hung path?); the suspend was interrupted and undone, the old \
         table stays live", .limit.as_secs_f64()
    )]
    SuspendTimeout { map: String, limit: Duration },
    #[error("map '{map}' is not a multipath map (targets: {targets})")]
    NotMultipath { map: String, targets: String },
    #[error("map '{map}': the kernel's {what} does not parse ({text:?}): {err}")]
    Parse {
        map: String,
        what: &'static str,
        text: String,
        err: ParseError,
    },
    #[error("{op} on '{map}': {msg}")]
    Other { op: Op, map: String, msg: String },
}

fn holders_note(h: &[String]) -> String {
    if h.is_empty() {
        String::new()
    } else {
        format!(", held by {}", h.join(", "))
    }
}

fn hint_note(h: &Option<String>) -> String {
    h.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

impl DmError {
    /// Whether the kernel (rather than the caller or the environment) said no.
    pub fn is_kernel_refusal(&self) -> bool {
        matches!(
            self,
            DmError::Kernel { .. } | DmError::ResumeFailed { .. } | DmError::InUse { .. }
        )
    }
}

/// An errno with its text (`EBUSY (Device or resource busy)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::EPERM => "EPERM",
            libc::ENOENT => "ENOENT",
            libc::ENXIO => "ENXIO",
            libc::EIO => "EIO",
            libc::ENOMEM => "ENOMEM",
            libc::EACCES => "EACCES",
            libc::EBUSY => "EBUSY",
            libc::EEXIST => "EEXIST",
            libc::ENODEV => "ENODEV",
            libc::EINVAL => "EINVAL",
            libc::ENOTTY => "ENOTTY",
            _ => "",
        };
        let text = std::io::Error::from_raw_os_error(self.0);
        let text = text.to_string();
        // io::Error appends " (os error N)"; the symbolic name says more.
        let text = text.split(" (os error").next().unwrap_or(&text);
        if name.is_empty() {
            write!(f, "errno {} ({text})", self.0)
        } else {
            write!(f, "{name} ({text})")
        }
    }
}

/// What `DM_DEV_STATUS` says about a map.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MapInfo {
    pub name: String,
    pub uuid: Option<String>,
    pub dev: DevNum,
    pub open_count: i32,
    pub event_nr: u32,
    pub suspended: bool,
    pub read_only: bool,
    pub live_table: bool,
    pub inactive_table: bool,
}

impl MapInfo {
    fn from_info(name: &str, i: &DeviceInfo) -> Self {
        let f = i.flags();
        let d = i.device();
        MapInfo {
            name: i.name().map_or_else(|| name.to_string(), |n| n.to_string()),
            uuid: i.uuid().map(|u| u.to_string()),
            dev: DevNum::new(d.major, d.minor),
            open_count: i.open_count(),
            event_nr: i.event_nr(),
            suspended: f.contains(DmFlags::DM_SUSPEND),
            read_only: f.contains(DmFlags::DM_READONLY),
            live_table: f.contains(DmFlags::DM_ACTIVE_PRESENT),
            inactive_table: f.contains(DmFlags::DM_INACTIVE_PRESENT),
        }
    }

    /// The kernel name of the map's block device (`dm-0`).
    pub fn kernel_name(&self) -> String {
        format!("dm-{}", self.dev.minor)
    }
}

/// One line of a table or status: a target and its text.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Target {
    pub start: u64,
    pub length: u64,
    pub target_type: String,
    pub params: String,
}

/// A dm device as `DM_LIST_DEVICES` returns it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MapEntry {
    pub name: String,
    pub dev: DevNum,
    pub event_nr: Option<u32>,
}

/// How long a reload took. `stall` is what I/O sees: the resume ioctl, in
/// which the kernel suspends the map, swaps the table and resumes, new I/O
/// held at the dm queue; `load` came before it and held nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ReloadTiming {
    #[serde(with = "micros")]
    pub load: Duration,
    #[serde(with = "micros")]
    pub stall: Duration,
}

mod micros {
    pub fn serialize<S: serde::Serializer>(
        d: &std::time::Duration,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_micros() as u64)
    }
}

/// An open device-mapper control channel.
/// A reload's suspend waits for every request in flight on the map's
/// paths. Legitimate waits are milliseconds to a second or two (the
/// largest requests in flight on the slowest path); a request on a hung
/// path never completes, and the suspend, the map's I/O and the caller
/// would wait with it.
pub const DEFAULT_SUSPEND_LIMIT: Duration = Duration::from_secs(10);

pub struct Dm {
    dm: DM,
    /// How long a reload's suspend may wait for the I/O in flight (see
    /// [`suspend_guard`]).
    suspend_limit: Duration,
}

impl Dm {
    /// Opens `/dev/mapper/control`.
    pub fn open() -> Result<Self, DmError> {
        // The crate folds the open error into a string; check first so the
        // caller can tell "not root" from "no dm".
        if let Err(e) = std::fs::OpenOptions::new().read(true).open(CONTROL) {
            return Err(match e.kind() {
                std::io::ErrorKind::PermissionDenied => {
                    DmError::NotRoot(format!("opening {CONTROL}"))
                }
                _ => DmError::Unavailable(e.to_string()),
            });
        }
        let dm = DM::new().map_err(|e| DmError::Unavailable(e.to_string()))?;
        Ok(Dm {
            dm,
            suspend_limit: DEFAULT_SUSPEND_LIMIT,
        })
    }

    /// The dm ioctl interface version.
    pub fn version(&self) -> Result<(u32, u32, u32), DmError> {
        self.dm.version().map_err(|e| classify(Op::Version, "", e))
    }

    /// All dm devices, sorted by name.
    pub fn list(&self) -> Result<Vec<MapEntry>, DmError> {
        let mut v = ioctl::list_devices(self.dm.file()).map_err(|f| failure(Op::List, "", f))?;
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    /// Loaded target types with versions (`multipath` shows up once
    /// dm_multipath is loaded).
    pub fn target_versions(&self) -> Result<Vec<(String, u32, u32, u32)>, DmError> {
        self.dm
            .list_versions()
            .map_err(|e| classify(Op::Versions, "", e))
    }

    pub fn info(&self, map: &str) -> Result<MapInfo, DmError> {
        let name = dm_name(map)?;
        let i = self
            .dm
            .device_info(&DevId::Name(name))
            .map_err(|e| classify(Op::Info, map, e))?;
        Ok(MapInfo::from_info(map, &i))
    }

    /// Whether a dm device of that name exists.
    pub fn exists(&self, map: &str) -> Result<bool, DmError> {
        match self.info(map) {
            Ok(_) => Ok(true),
            Err(DmError::NoSuchMap(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The live table's targets, as the kernel prints them.
    pub fn table(&self, map: &str) -> Result<Vec<Target>, DmError> {
        self.table_status(map, Op::Table, ioctl::STATUS_TABLE_FLAG)
    }

    /// The live table's status lines.
    pub fn status(&self, map: &str) -> Result<Vec<Target>, DmError> {
        self.table_status(map, Op::Status, ioctl::NOFLUSH_FLAG)
    }

    fn table_status(&self, map: &str, op: Op, flags: u32) -> Result<Vec<Target>, DmError> {
        dm_name(map)?;
        ioctl::table_status(self.dm.file(), map, flags).map_err(|f| failure(op, map, f))
    }

    /// The live table of a multipath map, typed.
    pub fn multipath_table(&self, map: &str) -> Result<MultipathTable, DmError> {
        let t = single_multipath(map, self.table(map)?)?;
        MultipathTable::parse_params(t.start, t.length, &t.params).map_err(|err| DmError::Parse {
            map: map.into(),
            what: "table",
            text: t.params,
            err,
        })
    }

    /// The status of a multipath map, typed.
    pub fn multipath_status(&self, map: &str) -> Result<MultipathStatus, DmError> {
        let t = single_multipath(map, self.status(map)?)?;
        MultipathStatus::parse_params(t.start, t.length, &t.params).map_err(|err| DmError::Parse {
            map: map.into(),
            what: "status",
            text: t.params,
            err,
        })
    }

    /// Creates map `map` with DM UUID `uuid` and `table`, and makes it live.
    /// On any failure the half-made device is removed again.
    pub fn create(
        &self,
        map: &str,
        uuid: &str,
        table: &MultipathTable,
    ) -> Result<MapInfo, DmError> {
        let name = dm_name(map)?;
        let dm_uuid = DmUuid::new(uuid).map_err(|e| DmError::Other {
            op: Op::Create,
            map: map.into(),
            msg: format!("bad UUID '{uuid}': {e}"),
        })?;
        let id = DevId::Name(name);
        self.dm
            .device_create(name, Some(dm_uuid), DmOptions::default())
            .map_err(|e| match classify(Op::Create, map, e) {
                DmError::Kernel {
                    errno: Errno(libc::EBUSY),
                    ..
                } => DmError::Exists(map.into()),
                e => e,
            })?;
        let made = (|| {
            self.load(map, table)?;
            self.dm
                .device_suspend(&id, DmOptions::default())
                .map_err(|e| classify(Op::Resume, map, e))?;
            self.info(map)
        })();
        match made {
            Ok(info) => {
                make_node(map, info.dev);
                Ok(info)
            }
            Err(e) => {
                let _ = self.dm.device_remove(&id, DmOptions::default());
                Err(e)
            }
        }
    }

    fn load(&self, map: &str, table: &MultipathTable) -> Result<(), DmError> {
        let name = dm_name(map)?;
        let targets = [(
            table.start,
            table.length,
            "multipath".to_string(),
            table.render_params(),
        )];
        self.dm
            .table_load(&DevId::Name(name), &targets, DmOptions::default())
            .map(drop)
            .map_err(|e| match classify(Op::Load, map, e) {
                DmError::Kernel {
                    op,
                    map,
                    errno: errno @ Errno(libc::EINVAL),
                    hint,
                } => {
                    // The kernel asks modprobe for a missing selector; if it
                    // is still not there, that is the likeliest reason.
                    let missing: Vec<&str> = table
                        .groups
                        .iter()
                        .map(|g| g.selector.name())
                        .filter(|s| !selector_available(s))
                        .collect();
                    let hint = if missing.is_empty() {
                        hint
                    } else {
                        Some(format!(
                            "path selector module dm-{} is not available in this kernel",
                            missing[0]
                        ))
                    };
                    DmError::Kernel {
                        op,
                        map,
                        errno,
                        hint,
                    }
                }
                e => e,
            })
    }

    /// Sets how long a reload's suspend may wait for in-flight I/O.
    pub fn set_suspend_limit(&mut self, limit: Duration) {
        self.suspend_limit = limit;
    }

    /// Replaces the live table as multipathd does: load it into the
    /// inactive slot, then one resume with noflush + skip-lockfs, inside
    /// which the kernel suspends the map (queued I/O survives, no
    /// filesystem freeze), swaps the table in and resumes. I/O is held
    /// only inside that one ioctl, never while this process runs between
    /// two of them (nor if it dies there): a reader's stall is the one
    /// ioctl's (`cargo xtask bench reload` measures it).
    /// A failed load changes nothing. A suspend that fails or is
    /// interrupted (the guard) the kernel undoes, and the new table is
    /// dropped. A swap that fails leaves the map suspended: it is resumed
    /// with the old table.
    pub fn reload(&self, map: &str, table: &MultipathTable) -> Result<ReloadTiming, DmError> {
        let name = dm_name(map)?;
        let id = DevId::Name(name);
        let t0 = Instant::now();
        self.load(map, table)?;
        let loaded = Instant::now();
        fault_point("reload-after-load");
        let flags = DmFlags::DM_NOFLUSH | DmFlags::DM_SKIP_LOCKFS;
        let guard = suspend_guard::Guard::arm(self.suspend_limit);
        // The stall is the ioctl alone: the guard's timer is made before
        // and deleted after it, I/O flowing meanwhile.
        let t1 = Instant::now();
        let swapped = self
            .dm
            .device_suspend(&id, DmOptions::default().set_flags(flags));
        let t2 = Instant::now();
        let interrupted = guard.disarm();
        let Err(e) = swapped else {
            return Ok(ReloadTiming {
                load: loaded - t0,
                stall: t2 - t1,
            });
        };
        // Whatever failed, the new table must not be swapped in later by
        // someone else's resume.
        let _ = self.dm.table_clear(&id);
        if self.info(map).is_ok_and(|i| i.suspended) {
            let first = errno_of(&e).unwrap_or(Errno(libc::EIO));
            let second = self
                .dm
                .device_suspend(&id, DmOptions::default())
                .err()
                .map(|e| errno_of(&e).unwrap_or(Errno(libc::EIO)));
            return Err(DmError::ResumeFailed {
                map: map.into(),
                first,
                second,
            });
        }
        if interrupted {
            return Err(DmError::SuspendTimeout {
                map: map.into(),
                limit: self.suspend_limit,
            });
        }
        Err(classify(Op::Resume, map, e))
    }

    /// Drops the inactive table of a map (one loaded and never resumed,
    /// e.g. by a process that died in the middle of a reload), so that a
    /// later resume cannot swap it in.
    pub fn clear_inactive(&self, map: &str) -> Result<(), DmError> {
        let name = dm_name(map)?;
        self.dm
            .table_clear(&DevId::Name(name))
            .map(drop)
            .map_err(|e| classify(Op::ClearInactive, map, e))
    }

    /// Resumes a suspended map (with its inactive table if it has one:
    /// call [`Dm::clear_inactive`] first to keep the live one).
    pub fn resume(&self, map: &str) -> Result<(), DmError> {
        let name = dm_name(map)?;
        self.dm
            .device_suspend(&DevId::Name(name), DmOptions::default())
            .map(drop)
            .map_err(|e| classify(Op::Resume, map, e))
    }

    /// Removes a map that nothing holds open.
    pub fn remove(&self, map: &str) -> Result<MapInfo, DmError> {
        let info = self.info(map)?;
        if info.open_count > 0 {
            return Err(DmError::InUse {
                map: map.into(),
                open_count: info.open_count,
                holders: holders_of(&info.kernel_name()),
            });
        }
        let name = dm_name(map)?;
        self.dm
            .device_remove(&DevId::Name(name), DmOptions::default())
            .map_err(|e| match classify(Op::Remove, map, e) {
                DmError::Kernel {
                    errno: Errno(libc::EBUSY),
                    ..
                } => DmError::InUse {
                    map: map.into(),
                    open_count: self.info(map).map_or(-1, |i| i.open_count),
                    holders: holders_of(&info.kernel_name()),
                },
                e => e,
            })?;
        remove_node(map, info.dev);
        Ok(info)
    }

    /// Sends a multipath target message (no reload, no stall).
    pub fn message(&self, map: &str, msg: &Message) -> Result<(), DmError> {
        let name = dm_name(map)?;
        self.dm
            .target_msg(&DevId::Name(name), Some(0), &msg.render())
            .map(drop)
            .map_err(|e| match classify(Op::Message, map, e) {
                DmError::Kernel {
                    op,
                    map,
                    errno,
                    hint: None,
                } => DmError::Kernel {
                    op,
                    map,
                    errno,
                    hint: msg.hint(errno.0),
                },
                e => e,
            })
    }

    /// Arms the control fd's event notification (dm ioctl >= 4.37): any dm
    /// event after this call wakes [`Dm::poll_events`].
    pub fn arm_events(&self) -> Result<(), DmError> {
        ioctl::arm_poll(self.dm.file()).map_err(|f| failure(Op::Wait, "-", f))
    }

    /// Waits until a dm event (of any map) happened since the last
    /// [`Dm::arm_events`], or `timeout` passes. Returns whether one did.
    pub fn poll_events(&self, timeout: Duration) -> Result<bool, DmError> {
        use std::os::fd::AsRawFd;
        let mut pfd = libc::pollfd {
            fd: self.dm.file().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms.max(1)) };
        if r < 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(DmError::Other {
                op: Op::Wait,
                map: "-".into(),
                msg: format!("poll on {CONTROL}: {err}"),
            });
        }
        Ok(r > 0)
    }
}

/// The environment variable of the test-only fault hook: set to a step's
/// name, it makes the process SIGKILL itself at that step, so tests can
/// prove that the next start repairs what was cut short:
/// `reload-after-load` right after [`Dm::reload`] loaded the new table
/// (the resume not yet asked), `takeover-after-stop` once multipathd has
/// stopped (its maps not yet managed), `handback-after-release` once the
/// maps are let go (multipathd not yet started). Unset (always, in
/// production) it costs one environment lookup per step.
pub const FAULT_ENV: &str = "PATHPILOT_FAULT";

pub(crate) fn fault_point(step: &str) {
    if std::env::var_os(FAULT_ENV).is_some_and(|v| v == step) {
        eprintln!("pathpilot: {FAULT_ENV}={step}: killing myself (test fault hook)");
        // SAFETY: raise has no preconditions; SIGKILL cannot be caught, so
        // nothing of ours runs after it, as with an outside `kill -9`.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}

fn dm_name(map: &str) -> Result<&DmName, DmError> {
    if map.is_empty() || map.contains('/') || map == "." || map == ".." {
        return Err(DmError::BadName(map.into()));
    }
    DmName::new(map).map_err(|_| DmError::BadName(map.into()))
}

fn single_multipath(map: &str, lines: Vec<Target>) -> Result<Target, DmError> {
    match <[Target; 1]>::try_from(lines) {
        Ok([t]) if t.target_type == "multipath" => Ok(t),
        Ok([t]) => Err(DmError::NotMultipath {
            map: map.into(),
            targets: t.target_type,
        }),
        Err(lines) => Err(DmError::NotMultipath {
            map: map.into(),
            targets: if lines.is_empty() {
                "none (no live table)".into()
            } else {
                lines
                    .iter()
                    .map(|t| t.target_type.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        }),
    }
}

fn errno_of(e: &devicemapper::DmError) -> Option<Errno> {
    match e {
        devicemapper::DmError::Core(devicemapper::errors::Error::Ioctl(_, _, _, errno)) => {
            Some(Errno(**errno as i32))
        }
        _ => None,
    }
}

/// Turns the crate's error into ours, naming the ioctl and the map.
fn classify(op: Op, map: &str, e: devicemapper::DmError) -> DmError {
    let Some(errno) = errno_of(&e) else {
        return DmError::Other {
            op,
            map: map.into(),
            msg: e.to_string(),
        };
    };
    classify_errno(op, map, errno)
}

/// A failure of pathpilot's own ioctls, as the crate's are classified.
fn failure(op: Op, map: &str, f: ioctl::Failure) -> DmError {
    match f {
        ioctl::Failure::Errno(e) => classify_errno(op, map, Errno(e)),
        ioctl::Failure::Malformed(why) => DmError::Other {
            op,
            map: map.into(),
            msg: format!("the kernel's answer does not parse: {why}"),
        },
    }
}

/// An ioctl's errno as our error, naming the ioctl and the map.
fn classify_errno(op: Op, map: &str, errno: Errno) -> DmError {
    match errno.0 {
        libc::EPERM | libc::EACCES => DmError::NotRoot(format!("{op} on '{map}'")),
        // The dm ioctls answer ENXIO for "no device of that name".
        libc::ENXIO if !map.is_empty() && op != Op::Message => DmError::NoSuchMap(map.into()),
        _ => DmError::Kernel {
            op,
            map: map.into(),
            errno,
            hint: hint(op, errno.0),
        },
    }
}

fn hint(op: Op, errno: i32) -> Option<String> {
    let h = match (op, errno) {
        (Op::Load, libc::EINVAL) => "the multipath target rejected the table; dmesg has the reason",
        (Op::Load, libc::EBUSY) => "a path is held exclusively by another user (another map?)",
        (Op::Load, libc::ENXIO | libc::ENODEV) => "a path device is gone",
        (Op::Suspend, libc::EBUSY) => "the map is busy being suspended or resumed",
        _ => return None,
    };
    Some(h.into())
}

/// Whether a path selector's module is loaded (or built in and visible
/// in /sys/module). The kernel loads selectors on demand, so `false` only
/// matters after a refused load.
pub fn selector_available(name: &str) -> bool {
    Path::new("/sys/module")
        .join(format!("dm_{}", name.replace('-', "_")))
        .exists()
}

/// The dm devices holding a block device (`/sys/class/block/<name>/holders`).
pub fn holders_of(kernel_name: &str) -> Vec<String> {
    let dir = Path::new("/sys/class/block")
        .join(kernel_name)
        .join("holders");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn udev_running() -> bool {
    Path::new("/run/udev/control").exists()
}

fn node_path(map: &str) -> PathBuf {
    Path::new(MAPPER_DIR).join(map)
}

/// Without udevd nobody makes `/dev/mapper/<name>`; do what libdevmapper's
/// fallback does so the name works as a path. Best effort: the map is
/// reachable as `/dev/dm-N` either way.
fn make_node(map: &str, dev: DevNum) {
    if udev_running() || !Path::new(MAPPER_DIR).is_dir() {
        return;
    }
    let p = node_path(map);
    if p.exists() {
        return;
    }
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
        return;
    };
    // SAFETY: a valid NUL-terminated path; mknod has no other preconditions.
    unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFBLK | 0o660,
            libc::makedev(dev.major, dev.minor),
        );
    }
}

fn remove_node(map: &str, dev: DevNum) {
    use std::os::unix::fs::MetadataExt;
    if udev_running() {
        return;
    }
    let p = node_path(map);
    if let Ok(md) = std::fs::symlink_metadata(&p)
        && md.file_type().is_block_device()
        && DevNum::from_rdev(md.rdev()) == dev
    {
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_display_names_the_errno() {
        assert_eq!(
            Errno(libc::EBUSY).to_string(),
            "EBUSY (Device or resource busy)"
        );
        assert!(Errno(999).to_string().starts_with("errno 999"));
    }

    #[test]
    fn names_are_checked_before_any_ioctl() {
        assert!(matches!(dm_name(""), Err(DmError::BadName(_))));
        assert!(matches!(dm_name("a/b"), Err(DmError::BadName(_))));
        assert!(matches!(
            dm_name(&"x".repeat(200)),
            Err(DmError::BadName(_))
        ));
        assert!(dm_name("mpatha").is_ok());
    }

    #[test]
    fn error_lines_name_the_ioctl_and_map() {
        let e = DmError::Kernel {
            op: Op::Load,
            map: "mpatha".into(),
            errno: Errno(libc::EINVAL),
            hint: hint(Op::Load, libc::EINVAL),
        };
        let s = e.to_string();
        assert!(
            s.contains("DM_TABLE_LOAD") && s.contains("mpatha") && s.contains("EINVAL"),
            "{s}"
        );
        let e = DmError::ResumeFailed {
            map: "mpatha".into(),
            first: Errno(libc::EINVAL),
            second: None,
        };
        assert!(e.to_string().contains("old table"));
    }

    #[test]
    fn single_multipath_rejects_other_targets() {
        let t = |ty: &str| Target {
            start: 0,
            length: 8,
            target_type: ty.into(),
            params: String::new(),
        };
        assert!(single_multipath("m", vec![t("multipath")]).is_ok());
        assert!(matches!(
            single_multipath("m", vec![t("linear")]),
            Err(DmError::NotMultipath { .. })
        ));
        assert!(matches!(
            single_multipath("m", vec![]),
            Err(DmError::NotMultipath { .. })
        ));
    }
}
