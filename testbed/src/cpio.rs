//! A minimal `newc` cpio writer.
//!
//! Written here rather than shelling out to `cpio` because the archive is
//! assembled from scattered host files (library closures, kernel modules)
//! placed at chosen guest paths, plus device nodes that an unprivileged
//! `find | cpio` of a staging directory could not create.
use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::{Context, Result};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// Streams entries into a `newc` archive; parent directories are created
/// implicitly so callers only name the files they care about.
pub struct Cpio {
    out: BufWriter<File>,
    ino: u32,
    dirs: HashSet<String>,
    entries: usize,
}

impl Cpio {
    pub fn create(path: &Path) -> Result<Self> {
        let f = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 20, f),
            ino: 1,
            dirs: HashSet::new(),
            entries: 0,
        })
    }

    fn header(&mut self, name: &str, mode: u32, size: usize, rdev: (u32, u32)) -> Result<()> {
        self.ino += 1;
        self.entries += 1;
        let namesize = name.len() + 1;
        let nlink = if mode & S_IFDIR == S_IFDIR { 2 } else { 1 };
        let hdr = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdev.0, rdev.1, namesize, 0
        );
        self.out.write_all(hdr.as_bytes())?;
        self.out.write_all(name.as_bytes())?;
        self.out.write_all(&[0])?;
        self.pad(110 + namesize)
    }

    fn pad(&mut self, len: usize) -> Result<()> {
        let n = (4 - len % 4) % 4;
        self.out.write_all(&[0u8; 4][..n])?;
        Ok(())
    }

    /// Normalises a guest path to the archive's relative form and creates
    /// its missing parent directories.
    fn prepare(&mut self, guest: &str) -> Result<String> {
        let rel = guest.trim_start_matches('/').to_string();
        if let Some((parent, _)) = rel.rsplit_once('/') {
            self.dir(parent)?;
        }
        Ok(rel)
    }

    pub fn dir(&mut self, guest: &str) -> Result<()> {
        let rel = guest.trim_matches('/').to_string();
        if rel.is_empty() || self.dirs.contains(&rel) {
            return Ok(());
        }
        if let Some((parent, _)) = rel.rsplit_once('/') {
            self.dir(parent)?;
        }
        self.header(&rel, S_IFDIR | 0o755, 0, (0, 0))?;
        self.dirs.insert(rel);
        Ok(())
    }

    pub fn bytes(&mut self, guest: &str, mode: u32, data: &[u8]) -> Result<()> {
        let rel = self.prepare(guest)?;
        self.header(&rel, S_IFREG | mode, data.len(), (0, 0))?;
        self.out.write_all(data)?;
        self.pad(data.len())
    }

    /// Copies a host file (symlinks followed) to `guest`, keeping its
    /// permission bits.
    pub fn file(&mut self, host: &Path, guest: &str) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let meta =
            std::fs::metadata(host).with_context(|| format!("cannot stat {}", host.display()))?;
        let data =
            std::fs::read(host).with_context(|| format!("cannot read {}", host.display()))?;
        self.bytes(guest, meta.permissions().mode() & 0o7777, &data)
    }

    pub fn symlink(&mut self, guest: &str, target: &str) -> Result<()> {
        let rel = self.prepare(guest)?;
        self.header(&rel, S_IFLNK | 0o777, target.len(), (0, 0))?;
        self.out.write_all(target.as_bytes())?;
        self.pad(target.len())
    }

    pub fn chardev(&mut self, guest: &str, major: u32, minor: u32) -> Result<()> {
        let rel = self.prepare(guest)?;
        self.header(&rel, S_IFCHR | 0o600, 0, (major, minor))
    }

    /// Writes the trailer; returns the number of entries written.
    pub fn finish(mut self) -> Result<usize> {
        self.header("TRAILER!!!", 0, 0, (0, 0))?;
        self.out.flush()?;
        Ok(self.entries - 1)
    }
}
