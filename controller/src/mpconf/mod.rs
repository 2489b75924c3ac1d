//! multipath-tools' configuration, read rather than re-typed: the
//! effective configuration `multipath -t` prints (its built-in per-array
//! table with the admin's multipath.conf and conf.d merged in), or the
//! files alone where the binary is missing; which settings multipath-tools
//! would choose for an array and where each came from; and the table
//! pathpilot builds from them (docs/multipath-conf.md).
//!
//! - [`syntax`]: multipath.conf's syntax, parsed to a tree and rendered
//!   back;
//! - [`model`]: the sections and settings, typed, each with its line;
//! - [`select`]: propsel.c's choices and their origins;
//! - [`plan`]: multipath-tools' table and pathpilot's, and why they
//!   differ;
//! - [`lun`]: a discovered LUN planned, named and filtered with them.
use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::{Arc, Mutex},
};

pub mod lun;
pub mod model;
pub mod plan;
pub mod select;
pub mod syntax;

pub use model::Conf;
pub use select::Effective;
use syntax::Document;

use crate::mpath::MultipathTable;

/// Where multipath-tools keeps its configuration.
pub const CONF_FILE: &str = "/etc/multipath.conf";
pub const CONF_DIR: &str = "/etc/multipath/conf.d";
/// multipath-tools' list of the WWIDs it has mapped (`wwids_file`).
pub const WWIDS: &str = "/etc/multipath/wwids";
/// Where the `multipath` binary is looked for, besides `PATH`.
const BIN_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// Why multipath-tools' configuration could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    #[error("{file} {err}")]
    Syntax {
        file: String,
        err: syntax::SyntaxError,
    },
    #[error("cannot read {file}: {err}")]
    Read { file: String, err: std::io::Error },
    #[error("{cmd} failed: {msg}")]
    Command { cmd: String, msg: String },
}

/// Where a configuration is read from: the files and the binary (tests
/// point them elsewhere).
#[derive(Clone, Debug)]
pub struct Sources {
    pub conf_file: PathBuf,
    pub conf_dir: PathBuf,
    /// The `multipath` binary, if installed.
    pub binary: Option<PathBuf>,
}

impl Sources {
    /// This host's.
    pub fn system() -> Sources {
        Sources {
            conf_file: CONF_FILE.into(),
            conf_dir: CONF_DIR.into(),
            binary: binary(),
        }
    }

    /// Whether multipath-tools is installed or configured here.
    pub fn installed(&self) -> bool {
        self.binary.is_some() || self.conf_file.exists()
    }

    /// The admin's files, in the order multipath-tools reads them.
    pub fn files(&self) -> Vec<PathBuf> {
        let mut v = vec![];
        if self.conf_file.exists() {
            v.push(self.conf_file.clone());
        }
        let mut d: Vec<PathBuf> = std::fs::read_dir(&self.conf_dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.path())
                    .filter(|p| p.extension().is_some_and(|e| e == "conf"))
                    .collect()
            })
            .unwrap_or_default();
        d.sort();
        v.extend(d);
        v
    }

    /// A one-line account of what was read.
    pub fn describe(&self) -> String {
        let files: Vec<String> = self
            .files()
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        let files = if files.is_empty() {
            "no multipath.conf".to_string()
        } else {
            files.join(", ")
        };
        match &self.binary {
            Some(b) => format!("{} -t, with {files}", b.display()),
            None => format!("{files} (no multipath binary: no built-in hwtable)"),
        }
    }
}

/// The `multipath` binary, from `PATH` or the usual places.
pub fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(BIN_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join("multipath"))
        .find(|p| p.is_file())
}

/// One file, typed.
pub fn read_file(path: &Path) -> Result<Conf, ConfError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|err| ConfError::Read {
        file: file.clone(),
        err,
    })?;
    parse(&text, &file)
}

/// A configuration text, typed; `file` names it in errors and origins.
pub fn parse(text: &str, file: &str) -> Result<Conf, ConfError> {
    let doc = Document::parse(text).map_err(|err| ConfError::Syntax {
        file: file.to_string(),
        err,
    })?;
    Conf::from_document(&doc, file).map_err(|err| ConfError::Syntax {
        file: file.to_string(),
        err,
    })
}

/// Reads the effective configuration: the admin's files (a mistake in one
/// is an error: nothing is built from a file misread), and `multipath -t`
/// where the binary is installed.
pub fn read(src: &Sources) -> Result<Effective, ConfError> {
    let admin = Conf::merge_files(
        src.files()
            .iter()
            .map(|f| read_file(f))
            .collect::<Result<Vec<_>, _>>()?,
    );
    let Some(bin) = &src.binary else {
        return Ok(Effective {
            conf: admin.clone(),
            admin,
            builtin: false,
        });
    };
    let cmd = format!("{} -t", bin.display());
    let out = Command::new(bin)
        .arg("-t")
        .output()
        .map_err(|e| ConfError::Command {
            cmd: cmd.clone(),
            msg: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(ConfError::Command {
            cmd,
            msg: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    let conf = parse(&String::from_utf8_lossy(&out.stdout), &cmd)?;
    Ok(Effective {
        conf,
        admin,
        builtin: true,
    })
}

/// What the last read saw of the files and the binary: a change of any
/// means reading again.
type Stamp = Vec<(PathBuf, Option<std::time::SystemTime>)>;

fn stamp(src: &Sources) -> Stamp {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut v: Stamp = src
        .files()
        .into_iter()
        .map(|f| (f.clone(), mtime(&f)))
        .collect();
    v.push((src.conf_dir.clone(), mtime(&src.conf_dir)));
    if let Some(b) = &src.binary {
        v.push((b.clone(), mtime(b)));
    }
    v
}

/// This host's configuration, for a reader that asks often (the daemon's
/// scans): read again only when a file, conf.d or the binary changed.
pub fn current() -> Result<Arc<Effective>, ConfError> {
    static LAST: Mutex<Option<(Stamp, Arc<Effective>)>> = Mutex::new(None);
    let src = Sources::system();
    let now = stamp(&src);
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((s, e)) = last.as_ref()
        && *s == now
    {
        return Ok(e.clone());
    }
    let e = Arc::new(read(&src)?);
    *last = Some((now, e.clone()));
    Ok(e)
}

/// multipath-tools' configuration where `cfg` follows it.
pub fn followed(cfg: &crate::config::Config) -> Result<Option<Arc<Effective>>, ConfError> {
    if !cfg.follow_multipath_conf(Sources::system().installed()) {
        return Ok(None);
    }
    current().map(Some)
}

/// The tables `multipath -d -v4` says it would load, by WWID: its
/// `: ALIAS (WWID)` lines name the maps (the alias is the WWID where no
/// such line is), its `ALIAS: assembled map [PARAMS]` lines give their
/// tables (`length` is set by the caller, the parameters do not hold it).
pub fn parse_dry_run(out: &str, length: u64) -> Vec<(String, MultipathTable)> {
    let mut aliases: Vec<(String, String)> = vec![];
    let mut maps: Vec<(String, String)> = vec![];
    for l in out.lines() {
        // The topology's first line: `ACTION: ALIAS (WWID) ...`, with no
        // action word on a dry run and no `(WWID)` where the alias is it.
        if let Some((_, rest)) = l.split_once(": ") {
            let mut w = rest.split_whitespace();
            if let (Some(alias), Some(wwid)) = (w.next(), w.next())
                && let Some(wwid) = wwid.strip_prefix('(').and_then(|w| w.strip_suffix(')'))
            {
                aliases.push((alias.to_string(), wwid.to_string()));
            }
        }
        if let Some((head, params)) = l.split_once(": assembled map [") {
            let alias = head.rsplit(['|', ' ']).next().unwrap_or("").trim();
            let params = params.trim_end().trim_end_matches(']');
            maps.push((alias.to_string(), params.to_string()));
        }
    }
    maps.into_iter()
        .filter_map(|(alias, params)| {
            let wwid = aliases
                .iter()
                .find(|(a, _)| *a == alias)
                .map_or(alias.clone(), |(_, w)| w.clone());
            MultipathTable::parse_params(0, length, &params)
                .ok()
                .map(|t| (wwid, t))
        })
        .collect()
}

/// Runs `multipath -d -v4 DEV` and returns the table it would load for
/// `wwid`, if it would make one.
pub fn dry_run(
    bin: &Path,
    dev: &str,
    wwid: &str,
    length: u64,
) -> Result<Option<MultipathTable>, String> {
    let out = Command::new(bin)
        .args(["-d", "-v4", dev])
        .output()
        .map_err(|e| format!("{} -d: {e}", bin.display()))?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(parse_dry_run(&text, length)
        .into_iter()
        .find(|(w, _)| w == wwid)
        .map(|(_, t)| t))
}

#[cfg(test)]
mod tests;
