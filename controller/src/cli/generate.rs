//! `pathpilot generate man|completions|config DIR`: the files a package
//! ships, made from the command line's own definitions (clap) and the
//! config's documented keys, so they cannot drift from the program.
//! Hidden from `--help`: it is for packagers (`cargo xtask package`).
use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{Context, Result};
use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;

use crate::config::{self, KEYS};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum What {
    /// pathpilot(8), pathpilot-SUBCOMMAND(8) and pathpilot.conf(5).
    Man,
    /// bash, zsh and fish completion scripts.
    Completions,
    /// The default /etc/pathpilot/config.toml (every key commented out).
    Config,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    pub what: What,
    /// Where to write (created if missing).
    pub dir: PathBuf,
    /// config: the keys at their defaults uncommented (docs/configuration.md's form).
    #[arg(long)]
    pub uncommented: bool,
}

pub fn run(a: Args) -> Result<()> {
    fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let written = match a.what {
        What::Man => man(&a.dir)?,
        What::Completions => completions(&a.dir)?,
        What::Config => {
            let p = a.dir.join("config.toml");
            if a.uncommented {
                fs::write(&p, config::default_file(false))?;
            } else {
                fs::write(&p, config_file())?;
            }
            vec![p]
        }
    };
    for p in written {
        println!("{}", p.display());
    }
    Ok(())
}

/// The packaged config file.
pub fn config_file() -> String {
    format!(
        "# pathpilot daemon configuration (pathpilot.conf(5)).\n\
         # Every key is optional; each line shows its default, commented out.\n\
         # An unknown key or a bad value stops the daemon with the key and its line;\n\
         # `systemctl reload pathpilot` (SIGHUP) re-reads this file.\n{}",
        config::default_file(true)
    )
}

fn completions(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![];
    for (shell, name) in [
        (Shell::Bash, "pathpilot"),
        (Shell::Zsh, "_pathpilot"),
        (Shell::Fish, "pathpilot.fish"),
    ] {
        let p = dir.join(name);
        let mut f = fs::File::create(&p)?;
        clap_complete::generate(shell, &mut super::Cli::command(), "pathpilot", &mut f);
        out.push(p);
    }
    Ok(out)
}

/// The operator model, for pathpilot-daemon(8) and pathpilot.conf(5).
const OPERATOR_MODEL: &[(&str, &str)] = &[
    (
        "One writer per map",
        "Every process that changes a map holds its lock (an flock on \
         /run/pathpilot/locks/MAP.lock) while it does: the daemon for each of its changes, \
         and pathpilot reload, set and path. A second writer waits up to 10 s, then says who \
         holds it. The lock file journals reloads: a daemon start repairs only a map that a \
         pathpilot process left between the load and the resume of a reload.",
    ),
    (
        "Through the daemon",
        "While a daemon runs, reload, set and path send a map it manages to it: it applies \
         the change under the map's lock, reads it back, logs it as an operator decision and \
         pins the knobs it changed; the tuner leaves them until pathpilot reload MAP --release, \
         pathpilot set MAP --release or the socket's release request. A path failed by hand \
         stays failed across reloads, restarts and the checker's verdicts until reinstated by \
         hand. Failed paths and pins are kept in /run/pathpilot/maps.json.",
    ),
    (
        "Changes made by others",
        "A table loaded or a knob written behind the daemon's back (dmsetup, multipathd, \
         sysfs) is taken as the map's new state, logged as an outside decision, and tuning of \
         that map stops until an operator resumes it \
         (pathpilot ctl '{\"cmd\":\"resume\",\"map\":\"MAP\"}').",
    ),
];

fn man(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = vec![];
    let root = super::Cli::command();
    let version = root.get_version().unwrap_or_default().to_string();
    let write = |name: &str,
                 section: &str,
                 cmd: clap::Command,
                 extra: &[(&str, &str)]|
     -> Result<PathBuf> {
        let man = clap_mangen::Man::new(cmd)
            .title(name.to_uppercase())
            .section(section)
            .source(format!("pathpilot {version}"))
            .manual("pathpilot");
        let mut buf = Vec::new();
        man.render(&mut buf)?;
        for (head, text) in extra {
            buf.extend_from_slice(
                format!(".SH \"{}\"\n{}\n", head.to_uppercase(), roff_text(text)).as_bytes(),
            );
        }
        let p = dir.join(format!("{name}.{section}"));
        fs::write(&p, buf)?;
        Ok(p)
    };
    out.push(write("pathpilot", "8", root.clone(), &[])?);
    for sub in root.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("pathpilot-{}", sub.get_name());
        let extra: &[(&str, &str)] = if sub.get_name() == "daemon" {
            OPERATOR_MODEL
        } else {
            &[]
        };
        let cmd = sub.clone().name(name.clone()).version(version.clone());
        out.push(write(&name, "8", cmd, extra)?);
    }
    let p = dir.join("pathpilot.conf.5");
    fs::write(&p, conf_page(&version))?;
    out.push(p);
    Ok(out)
}

/// Text for a roff paragraph: no line may start with a control character.
fn roff_text(s: &str) -> String {
    let escaped = s.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

/// pathpilot.conf(5), from the documented keys.
fn conf_page(version: &str) -> String {
    let mut p = format!(
        ".TH PATHPILOT.CONF 5 \"\" \"pathpilot {version}\" \"pathpilot\"\n\
         .SH NAME\npathpilot.conf \\- configuration of the pathpilot daemon\n\
         .SH SYNOPSIS\n/etc/pathpilot/config.toml\n\
         .SH DESCRIPTION\n\
         The daemon reads this TOML file at start (or the file given with \\fB\\-\\-config\\fR) \
         and again on SIGHUP (\\fBsystemctl reload pathpilot\\fR). Every key is optional; an \
         absent default file means all defaults. An unknown key or a bad value stops the \
         daemon with the key and its line. The socket and metrics addresses change only on \
         restart.\n\
         .SH KEYS\n"
    );
    let d = config::Config::default();
    let mut section = "";
    for k in KEYS {
        if k.section != section {
            section = k.section;
            p.push_str(&format!(".SS \"[{section}]\"\n"));
        }
        let default = (k.default)(&d)
            .map(|v| format!("default {v}"))
            .unwrap_or_else(|| format!("unset by default, e.g. {}", k.example.unwrap_or("")));
        p.push_str(&format!(
            ".TP\n.B {}\n{} ({})\n",
            k.key,
            roff_text(k.doc),
            roff_text(&default)
        ));
    }
    p.push_str(".SH \"THE OPERATOR MODEL\"\n");
    for (head, text) in OPERATOR_MODEL {
        p.push_str(&format!(".SS \"{head}\"\n{}\n", roff_text(text)));
    }
    p.push_str(".SH FILES\n.TP\n/etc/pathpilot/config.toml\nthis file\n.TP\n/run/pathpilot/maps.json\nthe state file: maps pathpilot made, paths failed by hand, pinned knobs\n.SH \"SEE ALSO\"\n\\fBpathpilot\\fR(8), \\fBpathpilot\\-daemon\\fR(8), \\fBmultipath.conf\\fR(5)\n");
    p
}
