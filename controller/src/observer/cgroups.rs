//! The cgroups whose bytes the bio probe counts: entries of a bounded LRU
//! map, pruned of the cgroups that are gone.
use pathpilot_common::CgroupKey;

use super::Observer;

impl Observer {
    /// Entries of the CGROUPS map now.
    pub fn cgroup_entries(&self) -> usize {
        self.cgroups.keys().filter_map(Result::ok).count()
    }

    /// Forgets the cgroups that no longer exist (a cgroup v2 id is its
    /// directory's inode number): the map is an LRU bounded anyway, and
    /// this keeps it to the cgroups alive. Returns how many went.
    pub fn prune_cgroups(&mut self) -> usize {
        let Some(root) = cgroup2_root() else {
            return 0;
        };
        let mut alive = std::collections::HashSet::new();
        let mut dirs = vec![root];
        while let Some(d) = dirs.pop() {
            if let Ok(m) = std::fs::metadata(&d) {
                use std::os::unix::fs::MetadataExt;
                alive.insert(m.ino());
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                dirs.extend(
                    rd.flatten()
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|e| e.path()),
                );
            }
        }
        let gone: Vec<CgroupKey> = self
            .cgroups
            .keys()
            .filter_map(Result::ok)
            .filter(|k| !alive.contains(&k.cgroup_id))
            .collect();
        for k in &gone {
            let _ = self.cgroups.remove(k);
        }
        gone.len()
    }
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on a hybrid system).
pub fn cgroup2_root() -> Option<std::path::PathBuf> {
    let m = std::fs::read_to_string("/proc/mounts").ok()?;
    m.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(2) == Some(&"cgroup2"))
        .and_then(|f| f.get(1).map(std::path::PathBuf::from))
}
