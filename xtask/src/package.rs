//! The Debian package: `cargo xtask package` builds
//! `target/debian/pathpilot_<version>_amd64.deb` by hand (a staging tree
//! and `dpkg-deb --build`): no cargo-deb to install, and every file is one
//! the program itself generated (`pathpilot generate`) or the repo holds.
use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result, bail};

use pathpilot_testbed::dirs::workspace_root;
use pathpilot_testbed::process;

/// Every file the package installs (its control files aside), one a
/// line: the build checks its staging tree against
/// it, and the `package` test the built .deb and an install of it.
const FILES: &str = include_str!("../../packaging/files.txt");

/// The paths [`FILES`] lists.
pub fn files() -> impl Iterator<Item = &'static str> {
    FILES
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

pub const CONFFILE: &str = "/etc/pathpilot/config.toml";

/// The workspace version (Cargo.toml's `[workspace.package]`).
pub fn version() -> Result<String> {
    let t = fs::read_to_string(workspace_root().join("Cargo.toml"))?;
    t.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| {
            l.strip_prefix("version")
                .and_then(|r| r.split('"').nth(1))
                .map(str::to_string)
        })
        .context("no version in [workspace.package]")
}

fn write(p: &Path, bytes: impl AsRef<[u8]>, mode: u32) -> Result<()> {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(p, bytes).with_context(|| format!("writing {}", p.display()))?;
    fs::set_permissions(p, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// gzip -9n, as Debian wants docs and man pages (no name, no time: the
/// same input gives the same package).
fn gzip_into(src: &Path, dst: &Path) -> Result<()> {
    let data = std::process::Command::new("gzip")
        .args(["-9nc"])
        .arg(src)
        .output()
        .context("gzip")?;
    if !data.status.success() {
        bail!("gzip {} failed", src.display());
    }
    write(dst, data.stdout, 0o644)
}

/// The documentation pages (every `docs/**/*.md`) and where the package
/// installs each: under /usr/share/doc/pathpilot/docs/, compressed as
/// Debian wants, so the README's relative links name their pages.
pub fn doc_pages(root: &Path) -> Result<Vec<(PathBuf, String)>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
        for e in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, out)?;
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
        Ok(())
    }
    let mut pages = vec![];
    walk(&root.join("docs"), &mut pages)?;
    pages.sort();
    pages
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(root)?.display().to_string();
            Ok((p, format!("usr/share/doc/pathpilot/{rel}.gz")))
        })
        .collect()
}

/// The Depends line: the packages of the shared libraries the binary
/// links (nothing else is needed at run time: device-mapper is ioctls,
/// eBPF is embedded).
fn depends(bin: &Path) -> Result<String> {
    let ldd = process::output(Command::new("ldd").arg(bin))?;
    let mut pkgs = std::collections::BTreeSet::new();
    for l in ldd.lines() {
        let Some(lib) = l
            .split("=>")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
        else {
            continue;
        };
        let owner = Command::new("dpkg").args(["-S", lib]).output()?;
        let text = String::from_utf8_lossy(&owner.stdout);
        let Some(pkg) = text.lines().next().and_then(|l| l.split(':').next()) else {
            // A path that dpkg knows under its /usr alias.
            let alias = Path::new("/usr").join(lib.trim_start_matches('/'));
            let o = Command::new("dpkg").arg("-S").arg(&alias).output()?;
            if let Some(p) = String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .and_then(|l| l.split(':').next())
            {
                pkgs.insert(p.to_string());
            }
            continue;
        };
        pkgs.insert(pkg.to_string());
    }
    if pkgs.is_empty() {
        bail!("no library packages found for {}", bin.display());
    }
    Ok(pkgs.into_iter().collect::<Vec<_>>().join(", "))
}

const POSTINST: &str = r#"#!/bin/sh
# Installing enables nothing. An upgrade restarts a running daemon: the new
# one adopts its maps as they are, without a reload.
set -e
if [ "$1" = configure ] && [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    if [ -n "$2" ] && systemctl is-active --quiet pathpilot.service; then
        systemctl restart pathpilot.service || true
    fi
fi
exit 0
"#;

const PRERM: &str = r#"#!/bin/sh
# Removing stops the daemon (SIGTERM: the probes detach, the maps stay and
# keep working). An upgrade leaves it running until postinst restarts it.
set -e
if [ "$1" = remove ] && [ -z "$DPKG_ROOT" ]; then
    if [ -d /run/systemd/system ] && systemctl is-active --quiet pathpilot.service; then
        systemctl stop pathpilot.service || true
    elif [ -r /run/pathpilot/daemon.lock ]; then
        # A daemon started by hand: its pid is in its lock file.
        pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' /run/pathpilot/daemon.lock)
        [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null || true
    fi
fi
exit 0
"#;

const POSTRM: &str = r#"#!/bin/sh
set -e
if [ -z "$DPKG_ROOT" ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
"#;

#[derive(clap::Args)]
pub struct Args {
    /// Package this pathpilot binary as it is, instead of building
    /// pathpilot (release) first.
    #[arg(long)]
    binary: Option<PathBuf>,
    /// Where the .deb (and its staging tree) goes, instead of
    /// target/debian.
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

/// `cargo xtask package`: builds pathpilot (release) unless given a
/// binary, then the package.
pub fn run(args: Args) -> Result<()> {
    let root = workspace_root();
    let bin = match args.binary {
        Some(b) => b,
        None => {
            process::run(Command::new(env!("CARGO")).current_dir(&root).args([
                "build",
                "--release",
                "-p",
                "pathpilot",
            ]))?;
            root.join("target/release/pathpilot")
        }
    };
    let out_dir = args.out_dir.unwrap_or_else(|| root.join("target/debian"));
    let deb = build(&bin, &out_dir)?;
    let size = fs::metadata(&deb)?.len();
    println!(
        "package: {} ({:.1} MiB); install with: dpkg -i {}",
        deb.display(),
        size as f64 / 1048576.0,
        deb.display()
    );
    Ok(())
}

/// Builds the package from `bin` (a release build of pathpilot) into
/// `out_dir`; returns the .deb's path.
fn build(bin: &Path, out_dir: &Path) -> Result<PathBuf> {
    let root = workspace_root();
    let version = version()?;
    let stage = out_dir.join("stage");
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage)?;
    let gen_dir = out_dir.join("generated");
    let _ = fs::remove_dir_all(&gen_dir);
    for what in ["man", "completions", "config"] {
        process::run(
            Command::new(bin)
                .args(["generate", what])
                .arg(&gen_dir)
                .stdout(std::process::Stdio::null()),
        )?;
    }
    let s = |p: &str| stage.join(p);
    write(&s("usr/sbin/pathpilot"), fs::read(bin)?, 0o755)?;
    process::run(
        Command::new("strip")
            .arg("--strip-unneeded")
            .arg(s("usr/sbin/pathpilot")),
    )?;
    write(
        &s("lib/systemd/system/pathpilot.service"),
        fs::read(root.join("packaging/pathpilot.service"))?,
        0o644,
    )?;
    write(
        &s("etc/pathpilot/config.toml"),
        fs::read(gen_dir.join("config.toml"))?,
        0o644,
    )?;
    for e in fs::read_dir(&gen_dir)? {
        let p = e?.path();
        let name = p
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if let Some(sec) = name.rsplit('.').next().filter(|x| *x == "8" || *x == "5") {
            gzip_into(&p, &s(&format!("usr/share/man/man{sec}/{name}.gz")))?;
        }
    }
    for (from, to) in [
        (
            "pathpilot",
            "usr/share/bash-completion/completions/pathpilot",
        ),
        ("_pathpilot", "usr/share/zsh/vendor-completions/_pathpilot"),
        (
            "pathpilot.fish",
            "usr/share/fish/vendor_completions.d/pathpilot.fish",
        ),
    ] {
        write(&s(to), fs::read(gen_dir.join(from))?, 0o644)?;
    }
    write(
        &s("usr/share/pathpilot/grafana/pathpilot.json"),
        fs::read(root.join("dashboards/grafana/pathpilot.json"))?,
        0o644,
    )?;
    for rules in ["pathpilot-alerts.yml", "pathpilot-records.yml"] {
        write(
            &s(&format!("usr/share/pathpilot/prometheus/{rules}")),
            fs::read(root.join("dashboards/prometheus").join(rules))?,
            0o644,
        )?;
    }
    gzip_into(
        &root.join("README.md"),
        &s("usr/share/doc/pathpilot/README.md.gz"),
    )?;
    for (page, to) in doc_pages(&root)? {
        gzip_into(&page, &s(&to))?;
    }
    gzip_into(
        &root.join("CHANGELOG.md"),
        &s("usr/share/doc/pathpilot/changelog.gz"),
    )?;
    write(
        &s("usr/share/doc/pathpilot/copyright"),
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: pathpilot\n\n\
         Files: *\nLicense: MIT or Apache-2.0\n",
        0o644,
    )?;
    for f in files() {
        if !s(f).exists() {
            bail!("the package would lack {f}");
        }
    }
    let installed_kib = dir_size(&stage)? / 1024;
    let control = format!(
        "Package: pathpilot\n\
         Version: {version}\n\
         Architecture: amd64\n\
         Maintainer: pathpilot developers <pathpilot@localhost>\n\
         Installed-Size: {installed_kib}\n\
         Depends: {}\n\
         Section: admin\n\
         Priority: optional\n\
         Description: controller for Linux dm-multipath with eBPF observation and online tuning\n \
         pathpilot builds dm-multipath maps through the device-mapper ioctls, watches\n \
         every path with eBPF programs on the block tracepoints, checks paths, and\n \
         retunes each map online with the knobs the running kernel honours, reading\n \
         every change back. It comes with a live dashboard (pathpilot top),\n \
         Prometheus metrics and a Grafana dashboard.\n",
        depends(bin)?
    );
    write(&s("DEBIAN/control"), control, 0o644)?;
    write(&s("DEBIAN/conffiles"), format!("{CONFFILE}\n"), 0o644)?;
    write(&s("DEBIAN/postinst"), POSTINST, 0o755)?;
    write(&s("DEBIAN/prerm"), PRERM, 0o755)?;
    write(&s("DEBIAN/postrm"), POSTRM, 0o755)?;
    let deb = out_dir.join(format!("pathpilot_{version}_amd64.deb"));
    process::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb)
            .stdout(std::process::Stdio::null()),
    )?;
    Ok(deb)
}

fn dir_size(p: &Path) -> Result<u64> {
    let mut n = 0;
    for e in fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            dir_size(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_docs_page_is_packaged_under_the_doc_directory() {
        let root = workspace_root();
        let pages = doc_pages(&root).unwrap();
        let has =
            |from: &str, to: &str| pages.iter().any(|(p, t)| p == &root.join(from) && t == to);
        assert!(has(
            "docs/configuration.md",
            "usr/share/doc/pathpilot/docs/configuration.md.gz"
        ));
        assert!(has(
            "docs/benchmarks/README.md",
            "usr/share/doc/pathpilot/docs/benchmarks/README.md.gz"
        ));
        // What the package's file list names under docs/ is among them.
        for f in files().filter(|f| f.contains("/docs/")) {
            assert!(pages.iter().any(|(_, t)| t == f), "{f}");
        }
    }
}
