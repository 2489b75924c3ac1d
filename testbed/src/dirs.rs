//! Where things are: the workspace, and the cache kept between runs.
use std::path::PathBuf;

/// The workspace root (this crate lives one level below it).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the testbed crate has a parent directory")
        .to_path_buf()
}

/// `~/.cache/pathpilot`, where tools and the testbed images are kept
/// between runs (outside the clone, so a fresh clone reuses them).
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PATHPILOT_CACHE") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
    PathBuf::from(home).join(".cache/pathpilot")
}

/// The testbed's part of the cache: images, locks, run directories.
pub fn testbed_dir() -> PathBuf {
    cache_dir().join("testbed")
}
