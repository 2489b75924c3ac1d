//! Sysfs attributes kept open between reads. A read at offset 0 of an open
//! attribute renders it afresh, so a value looked at every window or every
//! few seconds costs one `pread` instead of a path walk, an open, reads and
//! a close, which matters to an idle daemon watching many paths.
use std::{collections::HashMap, fs::File, hash::Hash, io, os::unix::fs::FileExt, path::PathBuf};

/// Open attribute files by key.
pub struct KeptFiles<K> {
    open: HashMap<K, File>,
    /// One page to read into, zeroed once: clearing a page for every read
    /// would cost more than the read, and the daemon reads a hundred
    /// attributes a window under load.
    buf: Vec<u8>,
}

impl<K> Default for KeptFiles<K> {
    fn default() -> Self {
        Self {
            open: HashMap::new(),
            buf: Vec::new(),
        }
    }
}

impl<K: Eq + Hash> KeptFiles<K> {
    /// The attribute's text, through the file kept for `key`, or from
    /// `path()` opened now. A kept file whose device went away fails its
    /// read (ENODEV); the path is then opened again, which finds a device
    /// that came back under the same name, or fails as a missing one does.
    pub fn read(&mut self, key: K, path: impl FnOnce() -> PathBuf) -> io::Result<String> {
        if self.buf.is_empty() {
            self.buf = vec![0; PAGE];
        }
        if let Some(f) = self.open.get(&key) {
            if let Ok(s) = read_at_start(f, &mut self.buf) {
                return Ok(s);
            }
            self.open.remove(&key);
        }
        let f = File::open(path())?;
        let s = read_at_start(&f, &mut self.buf)?;
        self.open.insert(key, f);
        Ok(s)
    }

    /// Closes the files whose key `keep` refuses.
    pub fn retain(&mut self, keep: impl Fn(&K) -> bool) {
        self.open.retain(|k, _| keep(k));
    }

    pub fn remove(&mut self, key: &K) {
        self.open.remove(key);
    }

    /// How many files are open.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

/// What a sysfs attribute shows at most.
const PAGE: usize = 4096;

/// An attribute's text (at most a page), read through `buf`.
fn read_at_start(f: &File, buf: &mut [u8]) -> io::Result<String> {
    let n = f.read_at(buf, 0)?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_file_reads_the_value_of_now_and_a_missing_one_fails() {
        let Some(lo) = crate::test_loop::TestLoop::attach("keptfiles") else {
            return;
        };
        let dir = PathBuf::from("/sys/class/block").join(lo.name());
        let mut kept = KeptFiles::default();
        let stat = |k: &mut KeptFiles<u8>| -> Vec<u64> {
            k.read(0, || dir.join("stat"))
                .unwrap()
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect()
        };
        let before = stat(&mut kept);
        // 8 direct reads of 4 KiB: the kept file shows them.
        let out = std::process::Command::new("dd")
            .args([
                &format!("if={}", lo.dev),
                "of=/dev/null",
                "bs=4k",
                "count=8",
                "iflag=direct",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let after = stat(&mut kept);
        assert_eq!(after[0] - before[0], 8, "{before:?} -> {after:?}");
        assert_eq!(kept.len(), 1);
        assert!(kept.read(1, || dir.join("no-such-attribute")).is_err());
        assert_eq!(kept.len(), 1);
        kept.retain(|k| *k != 0);
        assert!(kept.is_empty());
    }
}
