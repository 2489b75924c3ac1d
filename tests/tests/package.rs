//! The Debian package, built from the binary under test: its contents,
//! an install into a scratch root and a removal that keeps an edited
//! conffile, man pages that render without warnings, completions that load
//! in bash, the version line.
use std::{path::Path, process::Command};

use pathpilot_tests::host::{pathpilot_bin, sh, xtask_bin};

/// Every file the package installs, as `cargo xtask package` checks it
/// too: a file missing from the .deb, or from an install, fails here.
fn package_files() -> impl Iterator<Item = &'static str> {
    include_str!("../../packaging/files.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn scratch(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("pathpilot-pkg-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(cmd: &mut Command) -> String {
    let o = cmd.output().expect("runs");
    assert!(
        o.status.success(),
        "{cmd:?}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn the_package_installs_what_it_lists_and_keeps_an_edited_conffile() {
    let out = scratch("build");
    // As `cargo xtask package` builds it, from the binary under test.
    run(Command::new(xtask_bin())
        .args(["package", "--binary"])
        .arg(pathpilot_bin())
        .arg("--out-dir")
        .arg(&out));
    let deb = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("the package builds a .deb");
    let listing = run(Command::new("dpkg-deb").arg("-c").arg(&deb));
    let mut listed = 0;
    for f in package_files() {
        listed += 1;
        assert!(
            listing.lines().any(|l| l.ends_with(&format!("./{f}"))),
            "{f} not in the package:\n{listing}"
        );
    }
    assert!(listed >= 20, "the package's file list has {listed} entries");
    let info = run(Command::new("dpkg-deb").arg("-I").arg(&deb));
    for want in [
        "Package: pathpilot",
        "Depends: ",
        "libudev1",
        "Architecture: amd64",
    ] {
        assert!(info.contains(want), "{want}:\n{info}");
    }
    assert!(
        info.contains("conffiles") && info.contains("postinst"),
        "{info}"
    );
    // Into a scratch root: its own dpkg database, the maintainer scripts
    // run outside a chroot with DPKG_ROOT set (they leave the host's
    // systemd alone then).
    let root = scratch("root");
    for d in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    let dpkg = |args: &[&str]| {
        let mut c = Command::new("dpkg");
        c.arg(format!("--root={}", root.display()))
            .args([
                "--force-script-chrootless",
                "--force-depends",
                "--log=/dev/null",
            ])
            .args(args);
        c
    };
    run(dpkg(&["-i"]).arg(&deb));
    for f in package_files() {
        assert!(root.join(f).exists(), "{f} not installed");
    }
    let conf = root.join("etc/pathpilot/config.toml");
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str("mode = \"advise\"\n");
    std::fs::write(&conf, &text).unwrap();
    run(&mut dpkg(&["--remove", "pathpilot"]));
    assert!(!root.join("usr/sbin/pathpilot").exists(), "removed");
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        text,
        "the edited conffile stays after a removal"
    );
    run(&mut dpkg(&["--purge", "pathpilot"]));
    assert!(!conf.exists(), "a purge removes it");
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn man_pages_render_and_completions_load() {
    let dir = scratch("gen");
    let bin = pathpilot_bin();
    run(Command::new(&bin).args(["generate", "man"]).arg(&dir));
    run(Command::new(&bin)
        .args(["generate", "completions"])
        .arg(&dir));
    let mut pages = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.ends_with(".8") || name.ends_with(".5")) {
            continue;
        }
        pages += 1;
        let o = Command::new("man")
            .args(["--warnings=w", "-E", "UTF-8", "-l"])
            .arg(&p)
            .env("MANWIDTH", "80")
            .env("MAN_KEEP_FORMATTING", "0")
            .output()
            .expect("man (Debian package man-db)");
        let err = String::from_utf8_lossy(&o.stderr);
        // Overstrike bold ("N\x08N"), as man formats for a terminal: plain.
        let mut text = String::new();
        for c in String::from_utf8_lossy(&o.stdout).chars() {
            if c == '\x08' {
                text.pop();
            } else {
                text.push(c);
            }
        }
        assert!(o.status.success() && err.trim().is_empty(), "{name}: {err}");
        assert!(text.contains("NAME"), "{name}: {text}");
    }
    assert!(pages >= 13, "{pages} man pages");
    let conf = std::fs::read_to_string(dir.join("pathpilot.conf.5")).unwrap();
    assert!(conf.contains("no_path_retry_secs") && conf.contains("OPERATOR MODEL"));
    // bash: the script parses, and completes `pathpilot re<TAB>`.
    let bash = dir.join("pathpilot");
    sh(&format!("bash -n {}", bash.display()));
    let out = sh(&format!(
        "bash -c 'source {}; COMP_WORDS=(pathpilot re); COMP_CWORD=1; COMP_LINE=\"pathpilot re\"; \
         COMP_POINT=12; _pathpilot pathpilot re pathpilot; echo \"${{COMPREPLY[@]}}\"'",
        bash.display()
    ));
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words.split_whitespace().any(|w| w == "reload") && !words.contains("stat"),
        "{words}"
    );
    for f in ["_pathpilot", "pathpilot.fish"] {
        assert!(Path::new(&dir.join(f)).exists(), "{f}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_version_names_the_commit_and_the_ebpf_object() {
    let v = run(Command::new(pathpilot_bin()).arg("--version"));
    // pathpilot 0.1.0 (commit 0123456789ab, eBPF object 0123456789abcdef)
    let rest = v
        .trim()
        .strip_prefix(&format!("pathpilot {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{v}"));
    let (commit, obj) = rest
        .split_once(", eBPF object ")
        .unwrap_or_else(|| panic!("{v}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{v}"
    );
    let obj = obj.trim_end_matches(')');
    assert!(
        obj.len() == 16 && obj.chars().all(|c| c.is_ascii_hexdigit()),
        "{v}"
    );
}
