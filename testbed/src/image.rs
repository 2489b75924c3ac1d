//! Builds (and caches) what the VM boots from: the Debian kernel as a PVH
//! ELF, a two-layer initramfs and the LUN image.
//!
//! Everything lives in `~/.cache/pathpilot/testbed`, named by a key of what
//! it was built from, so a rebuild happens only when an input changed:
//! - `kernel-<pkg>_<version>/`: the unpacked `.deb`, `depmod`ed, and
//!   `vmlinux` (the ELF inside the bzImage: QEMU boots it with PVH, which
//!   skips the in-guest xz decompression that costs seconds under TCG);
//! - `base-<key>.cpio`: busybox, modules, dmsetup/fio/multipath and their
//!   libraries (~80 MB, almost never changes);
//! - `initrd-<basekey>-<layerkey>.cpio`: base + a small layer with `/init`
//!   and `pathpilot`. The kernel unpacks concatenated archives in order, so
//!   only the small layer is regenerated when the binary changes.
//! - `lun-<MiB>M.img`: pseudo-random data so reads are never holes.
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::cpio::Cpio;
use crate::dirs::{testbed_dir, workspace_root};
use crate::lock::Lock;
use crate::process;

/// Modules the guest loads at boot. Dependencies come from the kernel's
/// own modules.dep. The optional ones are skipped when this kernel lacks
/// them.
const MODULES: &[(&str, bool)] = &[
    ("virtio_mmio", true),
    ("virtio_pci", false),
    ("virtio_scsi", true),
    ("virtio_console", true),
    ("scsi_mod", true),
    ("sd_mod", true),
    ("sg", true),
    ("dm-mod", true),
    ("dm-multipath", true),
    ("dm-round-robin", true),
    ("dm-queue-length", true),
    ("dm-service-time", true),
    ("dm-historical-service-time", false),
    ("scsi_dh_alua", false),
    // The ALUA array (LIO): loaded by the testbed only when asked for.
    ("tcm_loop", false),
    ("target_core_iblock", false),
    ("9p", true),
    ("9pnet_virtio", true),
];

/// Modules in the image that a test loads itself, with its own parameters
/// (null_blk: a zoned device, `modprobe null_blk zoned=1 ...`); loaded at
/// boot they would add devices every test would see.
const ON_DEMAND: &[&str] = &["null_blk"];

/// Host binaries copied into the base layer with their library closure.
/// (flock: tests hold a map's lock file as another writer would.)
/// (udevadm: multipath-tools finds paths through udev's database, so its
/// baseline runs udevd; the same binary is systemd-udevd.)
/// (multipathd: the marginal bench's row of multipath-tools' own daemon.)
/// (blkzone: zone commands on a zoned null_blk, for the observer's test.)
const BINARIES: &[&str] = &[
    "dmsetup",
    "fio",
    "multipath",
    "multipathd",
    "flock",
    "udevadm",
    "blkzone",
];

/// What udev needs to fill its database for multipath-tools: the helpers
/// its rules run (a binary, and a shell script copied as it is), and the
/// rules for block devices, dm and multipath.
const UDEV_HELPERS: &[&str] = &["/lib/udev/scsi_id"];
const UDEV_SCRIPTS: &[&str] = &["/lib/udev/kpartx_id"];
const UDEV_RULES: &[&str] = &[
    "50-udev-default",
    "55-dm",
    "56-dm-mpath",
    "60-block",
    "60-persistent-storage",
    "60-persistent-storage-dm",
    "60-multipath",
    "95-dm-notify",
    "99-systemd",
];

/// The guest `/init` (busybox sh): boot setup plus the command agent.
pub const INIT: &str = include_str!("init.sh");

/// What a VM boots from.
#[derive(Debug, Clone)]
pub struct Images {
    pub vmlinux: PathBuf,
    pub initrd: PathBuf,
    pub lun: PathBuf,
    pub kernel_release: String,
}

/// Prints a progress line with the time the step took; the first build
/// takes a minute and people should see where it goes.
fn step<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let t = Instant::now();
    let r = f().with_context(|| format!("testbed image: {what}"))?;
    eprintln!("testbed: {what}: {:.2} s", t.elapsed().as_secs_f64());
    Ok(r)
}

/// 64-bit FNV-1a: a stable cache key (std's hasher may change between
/// Rust releases, which would silently invalidate the cache).
#[derive(Clone, Copy)]
pub struct Key(u64);
impl Key {
    pub fn new() -> Self {
        Key(0xcbf29ce484222325)
    }
    pub fn with(mut self, bytes: impl AsRef<[u8]>) -> Self {
        for b in bytes.as_ref() {
            self.0 ^= *b as u64;
            self.0 = self.0.wrapping_mul(0x100000001b3);
        }
        self.0 ^= 0xff;
        self
    }
    /// Keys a host file by path, size and mtime (cheap, and apt updates
    /// change them).
    pub fn file(self, p: &Path) -> Result<Self> {
        let m = fs::metadata(p).with_context(|| format!("cannot stat {}", p.display()))?;
        Ok(self
            .with(p.as_os_str().as_encoded_bytes())
            .with(format!("{}:{}", m.size(), m.mtime())))
    }
    pub fn hex(self) -> String {
        format!("{:016x}", self.0)
    }
}
impl Default for Key {
    fn default() -> Self {
        Self::new()
    }
}

/// Builds whatever is missing and returns the paths to boot from.
pub fn prepare(lun_mib: u64) -> Result<Images> {
    let dir = testbed_dir();
    fs::create_dir_all(&dir)?;
    let _lock = Lock::take(&dir.join("build.lock"), "another testbed image build")?;
    let kdir = kernel(&dir)?;
    let release = kernel_release(&kdir)?;
    let (base, base_key) = base_layer(&dir, &kdir, &release)?;
    let initrd = with_pathpilot_layer(&dir, &base, &base_key)?;
    let lun = lun_image(&dir, lun_mib)?;
    Ok(Images {
        vmlinux: kdir.join("vmlinux"),
        initrd,
        lun,
        kernel_release: release,
    })
}

/// The kernel package `linux-image-amd64` points at, with its candidate
/// version; `None` when apt cannot tell (offline, no lists).
fn kernel_package(dir: &Path) -> Option<(String, String)> {
    // apt-cache takes ~1.5 s; its answer only changes when the package
    // lists do (`apt-get update` rewrites /var/lib/apt/lists).
    let lists = stamp(Path::new("/var/lib/apt/lists")).unwrap_or_default();
    let memo = dir.join("kernel.choice");
    if let Some(line) = fs::read_to_string(&memo).ok()
        && let [st, pkg, ver] = line.split_whitespace().collect::<Vec<_>>()[..]
        && st == lists
    {
        return Some((pkg.to_string(), ver.to_string()));
    }
    let (pkg, ver) = kernel_package_from_apt()?;
    let _ = fs::write(&memo, format!("{lists} {pkg} {ver}\n"));
    Some((pkg, ver))
}

fn kernel_package_from_apt() -> Option<(String, String)> {
    let deps =
        process::output(Command::new("apt-cache").args(["depends", "linux-image-amd64"])).ok()?;
    let pkg = deps
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-6."))?
        .to_string();
    let pol = process::output(Command::new("apt-cache").args(["policy", &pkg])).ok()?;
    let ver = pol
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate: "))?
        .trim()
        .to_string();
    if ver == "(none)" {
        return None;
    }
    Some((pkg, ver))
}

/// Downloads and unpacks the Debian kernel (never installing it: the host's
/// /boot and modules stay untouched), runs depmod, extracts the ELF vmlinux.
fn kernel(dir: &Path) -> Result<PathBuf> {
    let (pkg, ver) = match kernel_package(dir) {
        Some(pv) => pv,
        None => {
            // Offline: any kernel we already have is good enough.
            let mut have: Vec<_> = fs::read_dir(dir)?
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.join("vmlinux").exists() && p.join(".done").exists())
                .collect();
            have.sort();
            if let Some(k) = have.pop() {
                eprintln!(
                    "testbed: apt-cache cannot name the kernel package; using cached {}",
                    k.display()
                );
                return Ok(k);
            }
            bail!(
                "cannot find the kernel package: `apt-cache depends linux-image-amd64` names no \
                 linux-image-6.* (run `cargo xtask setup`, or `apt-get update`) and nothing is cached in {}",
                dir.display()
            );
        }
    };
    let kdir = dir.join(format!("kernel-{pkg}_{ver}"));
    if kdir.join(".done").exists() {
        return Ok(kdir);
    }
    let _ = fs::remove_dir_all(&kdir);
    let dl = kdir.join("dl");
    fs::create_dir_all(&dl)?;
    step(&format!("apt-get download {pkg} ({ver})"), || {
        process::output(
            Command::new("apt-get")
                .args(["download", &format!("{pkg}={ver}")])
                .current_dir(&dl),
        )
        .map(drop)
        .context("the kernel package could not be downloaded (network? apt sources?)")
    })?;
    let deb = fs::read_dir(&dl)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download produced no .deb")?;
    let root = kdir.join("root");
    step("dpkg-deb -x", || {
        process::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))
    })?;
    let release = kernel_release(&kdir)?;
    step("depmod", || {
        process::run(Command::new("depmod").arg("-b").arg(&root).arg(&release))
    })?;
    step("extract PVH vmlinux", || {
        extract_vmlinux(
            &root.join(format!("boot/vmlinuz-{release}")),
            &kdir.join("vmlinux"),
        )
    })?;
    fs::remove_dir_all(&dl)?;
    fs::write(kdir.join(".done"), format!("{pkg} {ver}\n"))?;
    Ok(kdir)
}

fn kernel_release(kdir: &Path) -> Result<String> {
    let m = kdir.join("root/lib/modules");
    let mut names: Vec<String> = fs::read_dir(&m)
        .with_context(|| format!("no {}", m.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
        .pop()
        .with_context(|| format!("{} is empty", m.display()))
}

/// The bzImage carries the kernel as an xz stream; the decompressed ELF has
/// a PVH entry note, so QEMU can enter it directly.
fn extract_vmlinux(bz: &Path, out: &Path) -> Result<()> {
    let img = fs::read(bz).with_context(|| format!("cannot read {}", bz.display()))?;
    const MAGIC: &[u8] = b"\xfd7zXZ\x00";
    for off in
        (0..img.len().saturating_sub(MAGIC.len())).filter(|&i| &img[i..i + MAGIC.len()] == MAGIC)
    {
        let mut child = Command::new("xz")
            .args(["-dcq", "--single-stream"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("cannot run xz")?;
        let mut stdin = child.stdin.take().unwrap();
        let tail = img[off..].to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&tail);
        });
        let o = child.wait_with_output()?;
        let _ = feeder.join();
        if o.stdout.starts_with(b"\x7fELF") {
            let tmp = out.with_extension("tmp");
            fs::write(&tmp, &o.stdout)?;
            fs::rename(&tmp, out)?;
            return Ok(());
        }
    }
    bail!("no xz-compressed ELF found in {}", bz.display())
}

/// The shared libraries `ldd` says a binary needs, as the paths the dynamic
/// loader will look for.
fn ldd(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = process::output(Command::new("ldd").arg(bin))?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let p = match l.split_once("=>") {
                Some((_, rhs)) => rhs.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            p.starts_with('/').then(|| PathBuf::from(p))
        })
        .collect())
}

fn which(name: &str) -> Result<PathBuf> {
    for d in ["/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
        let p = Path::new(d).join(name);
        if p.exists() {
            return Ok(p);
        }
    }
    bail!("`{name}` is not installed on the host (run `cargo xtask setup`)")
}

/// Guest path -> host file, for a set of binaries and their libraries.
fn closure(bins: &[(PathBuf, String)]) -> Result<BTreeMap<String, PathBuf>> {
    let mut files = BTreeMap::new();
    for (host, guest) in bins {
        files.insert(guest.clone(), host.clone());
        for lib in ldd(host).with_context(|| format!("ldd {}", host.display()))? {
            files.insert(lib.to_string_lossy().into_owned(), lib);
        }
    }
    Ok(files)
}

fn stamp(p: &Path) -> Option<String> {
    let m = fs::metadata(p).ok()?;
    Some(format!("{}:{}", m.size(), m.mtime()))
}

/// What the base layer is made of, as this build of the testbed says: a
/// layer made from another recipe (a binary or module added) is not reused.
fn recipe() -> String {
    let mods: Vec<String> = MODULES
        .iter()
        .map(|(m, r)| format!("{m}:{r}"))
        .chain(ON_DEMAND.iter().map(|m| format!("{m}:demand")))
        .collect();
    Key::new()
        .with("base-v2")
        .with(BINARIES.join(","))
        .with(UDEV_HELPERS.join(","))
        .with(UDEV_SCRIPTS.join(","))
        .with(UDEV_RULES.join(","))
        .with(mods.join(","))
        .hex()
}

/// `base.manifest` holds the current base layer's key and the host files
/// it was made from, with their size and mtime. Re-checking those stats is
/// enough to reuse the layer, and skips running ldd and modprobe on ~50
/// files at every boot (about a second).
fn quick_base(dir: &Path, release: &str) -> Option<(PathBuf, String)> {
    let m = fs::read_to_string(dir.join("base.manifest")).ok()?;
    let mut lines = m.lines();
    let (key, rest) = lines.next()?.split_once(' ')?;
    if rest != format!("{release} {}", recipe()) {
        return None;
    }
    for l in lines {
        let (st, path) = l.split_once(' ')?;
        if stamp(Path::new(path))? != st {
            return None;
        }
    }
    let out = dir.join(format!("base-{key}.cpio"));
    out.exists().then(|| (out, key.to_string()))
}

fn write_manifest(dir: &Path, key: &str, release: &str, hosts: &[&Path]) -> Result<()> {
    let mut m = format!("{key} {release} {}\n", recipe());
    for h in hosts {
        m.push_str(&format!(
            "{} {}\n",
            stamp(h).unwrap_or_default(),
            h.display()
        ));
    }
    let tmp = dir.join("base.manifest.tmp");
    fs::write(&tmp, m)?;
    fs::rename(tmp, dir.join("base.manifest"))?;
    Ok(())
}

fn base_layer(dir: &Path, kdir: &Path, release: &str) -> Result<(PathBuf, String)> {
    if let Some(b) = quick_base(dir, release) {
        return Ok(b);
    }
    let root = kdir.join("root");
    // Modules with dependencies, straight from the kernel's modules.dep.
    let mut mods = BTreeMap::new();
    let mut load = Vec::new();
    let wanted = MODULES
        .iter()
        .map(|(m, required)| (m, *required, true))
        .chain(ON_DEMAND.iter().map(|m| (m, false, false)));
    for (m, required, at_boot) in wanted {
        let out = Command::new("modprobe")
            .arg("-d")
            .arg(&root)
            .args(["-S", release, "--show-depends", m])
            .output()
            .context("cannot run modprobe (kmod)")?;
        if !out.status.success() {
            if required {
                bail!(
                    "module {m} not found in the kernel {release}: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            continue;
        }
        if at_boot {
            load.push(*m);
        }
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(f) = l.strip_prefix("insmod ") {
                let f = f.split_whitespace().next().unwrap_or_default();
                let rel = Path::new(f).strip_prefix(&root).unwrap_or(Path::new(f));
                mods.insert(format!("/{}", rel.display()), PathBuf::from(f));
            }
        }
    }
    let mut bins: Vec<(PathBuf, String)> = Vec::new();
    for b in BINARIES {
        let p = which(b)?;
        bins.push((p.clone(), p.to_string_lossy().into_owned()));
    }
    // multipath dlopen()s its checkers and prioritizers.
    let plugin_dir = [
        "/lib/multipath",
        "/usr/lib/multipath",
        "/lib/x86_64-linux-gnu/multipath",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.is_dir());
    if let Some(pd) = plugin_dir {
        for e in fs::read_dir(pd)? {
            let p = e?.path();
            bins.push((p.clone(), p.to_string_lossy().into_owned()));
        }
    }
    for h in UDEV_HELPERS.iter().map(Path::new).filter(|p| p.exists()) {
        bins.push((h.to_path_buf(), h.to_string_lossy().into_owned()));
    }
    let mut files = closure(&bins)?;
    let rules = UDEV_RULES
        .iter()
        .map(|r| PathBuf::from(format!("/lib/udev/rules.d/{r}.rules")));
    for p in rules.chain(UDEV_SCRIPTS.iter().map(PathBuf::from)) {
        if p.exists() {
            files.insert(p.to_string_lossy().into_owned(), p);
        }
    }
    let busybox = Path::new("/bin/busybox");

    let mut key = Key::new()
        .with("base-v1")
        .with(release)
        .with(load.join(","));
    key = key.file(busybox)?;
    for (g, h) in files.iter().chain(mods.iter()) {
        key = key.with(g).file(h)?;
    }
    let key = key.hex();
    let out = dir.join(format!("base-{key}.cpio"));
    let mut hosts: Vec<&Path> = vec![busybox];
    hosts.extend(plugin_dir);
    hosts.extend(files.values().map(|p| p.as_path()));
    hosts.extend(mods.values().map(|p| p.as_path()));
    if out.exists() {
        write_manifest(dir, &key, release, &hosts)?;
        return Ok((out, key));
    }
    step("initramfs base layer", || {
        let tmp = out.with_extension("tmp");
        let mut c = Cpio::create(&tmp)?;
        for d in [
            "bin", "sbin", "usr/bin", "usr/sbin", "lib", "lib64", "proc", "sys", "dev", "tmp",
            "run", "etc", "root", "share", "mnt",
        ] {
            c.dir(d)?;
        }
        c.chardev("/dev/console", 5, 1)?;
        c.chardev("/dev/null", 1, 3)?;
        c.file(busybox, "/bin/busybox")?;
        let list = process::output(Command::new(busybox).arg("--list"))?;
        for a in list.lines().filter(|a| *a != "busybox" && !a.is_empty()) {
            c.symlink(&format!("/bin/{a}"), "busybox")?;
        }
        // The kernel's request_module() (dm loading a path selector) runs
        // /sbin/modprobe.
        c.symlink("/sbin/modprobe", "/bin/busybox")?;
        for (g, h) in &files {
            c.file(h, g)?;
        }
        for (g, h) in &mods {
            c.file(h, g)?;
        }
        let mdir = root.join("lib/modules").join(release);
        for f in [
            "modules.dep",
            "modules.alias",
            "modules.symbols",
            "modules.builtin",
            "modules.order",
            "modules.softdep",
            "modules.builtin.modinfo",
        ] {
            let p = mdir.join(f);
            if p.exists() {
                c.file(&p, &format!("/lib/modules/{release}/{f}"))?;
            }
        }
        c.bytes(
            "/etc/pathpilot-testbed/modules",
            0o644,
            format!("{}\n", load.join(" ")).as_bytes(),
        )?;
        c.bytes("/etc/passwd", 0o644, b"root:x:0:0:root:/root:/bin/sh\n")?;
        c.bytes("/etc/group", 0o644, b"root:x:0:\n")?;
        let n = c.finish()?;
        fs::rename(&tmp, &out)?;
        eprintln!(
            "testbed: base layer {} ({} entries, {} MiB, {} modules)",
            out.display(),
            n,
            fs::metadata(&out)?.len() >> 20,
            mods.len()
        );
        // Older bases (and the initrds built on them) are dead weight.
        prune(dir, "base-", &key);
        prune(dir, "initrd-", &key);
        Ok(())
    })?;
    write_manifest(dir, &key, release, &hosts)?;
    Ok((out, key))
}

/// Removes cache files named `<prefix>*` that do not contain `keep`.
fn prune(dir: &Path, prefix: &str, keep: &str) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(prefix) && !n.contains(keep) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
}

/// The freshly built controller, if any: tests of the testbed itself do not
/// need it, tests of the controller build it first.
pub fn pathpilot_binary() -> Option<PathBuf> {
    let p = workspace_root().join("target/release/pathpilot");
    p.exists().then_some(p)
}

fn with_pathpilot_layer(dir: &Path, base: &Path, base_key: &str) -> Result<PathBuf> {
    let pp = pathpilot_binary();
    let files = match &pp {
        Some(p) => closure(&[(p.clone(), "/usr/bin/pathpilot".into())])?,
        None => BTreeMap::new(),
    };
    let mut key = Key::new().with("layer-v1").with(INIT);
    for (g, h) in &files {
        key = key.with(g).file(h)?;
    }
    let key = key.hex();
    let out = dir.join(format!("initrd-{base_key}-{key}.cpio"));
    if out.exists() {
        // Marked used: a boot of another checkout prunes only initrds
        // nobody has used for a while (a test may wait a long time for the
        // machine-wide VM lock between preparing its initrd and booting).
        fs::File::options()
            .write(true)
            .open(&out)?
            .set_modified(std::time::SystemTime::now())?;
        return Ok(out);
    }
    step("initramfs pathpilot layer + concatenation", || {
        let layer = dir.join(format!("layer-{key}.tmp"));
        let mut c = Cpio::create(&layer)?;
        c.bytes("/init", 0o755, INIT.as_bytes())?;
        for (g, h) in &files {
            c.file(h, g)?;
        }
        c.finish()?;
        let tmp = out.with_extension("tmp");
        {
            let mut o = fs::File::create(&tmp)?;
            std::io::copy(&mut fs::File::open(base)?, &mut o)?;
            std::io::copy(&mut fs::File::open(&layer)?, &mut o)?;
        }
        fs::remove_file(&layer)?;
        fs::rename(&tmp, &out)?;
        match &pp {
            Some(p) => eprintln!("testbed: initrd includes {}", p.display()),
            None => {
                eprintln!("testbed: no target/release/pathpilot yet; the guest has no pathpilot")
            }
        }
        Ok(())
    })?;
    // Keep the newest few combinations, and any used in the last day
    // (another checkout may be about to boot it); drop the rest.
    let mut olds: Vec<_> = fs::read_dir(dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("initrd-"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    olds.sort();
    let n = olds.len();
    let day_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
    for (used, p) in olds.into_iter().take(n.saturating_sub(4)) {
        if p != out && used < day_ago {
            let _ = fs::remove_file(p);
        }
    }
    Ok(out)
}

/// The LUN: pseudo-random (so a checksum proves bytes came from the right
/// place) and deterministic (so two caches hold the same data).
fn lun_image(dir: &Path, mib: u64) -> Result<PathBuf> {
    let out = dir.join(format!("lun-{mib}M.img"));
    if out.exists() && fs::metadata(&out)?.len() == mib << 20 {
        return Ok(out);
    }
    step(&format!("LUN image {mib} MiB"), || {
        let tmp = out.with_extension("tmp");
        let mut f = std::io::BufWriter::new(fs::File::create(&tmp)?);
        let mut s: u64 = 0x9e3779b97f4a7c15;
        let mut buf = vec![0u8; 1 << 20];
        for _ in 0..mib {
            for chunk in buf.chunks_exact_mut(8) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                chunk.copy_from_slice(&s.to_le_bytes());
            }
            f.write_all(&buf)?;
        }
        f.into_inner()?.sync_all()?;
        fs::rename(&tmp, &out)?;
        Ok(())
    })?;
    Ok(out)
}
