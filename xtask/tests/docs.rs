//! The documentation's own checks, run by `cargo test` (so by `cargo xtask
//! test`): the README stays a first page, every page under docs/ is
//! reachable and every relative link in them resolves, and the Rust
//! sources explain themselves without pointing at a tracker or at
//! documents the repository does not hold.
use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Component, Path, PathBuf},
};

use pathpilot_testbed::dirs::workspace_root;

/// The README's most lines: a first page, not a reference.
const README_MAX_LINES: usize = 250;

/// Every file under `dir` whose name ends with `ext`, build outputs and
/// git's own files left out.
fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && name != ".git" {
                files(&p, ext, out);
            }
        } else if name.to_string_lossy().ends_with(ext) {
            out.push(p);
        }
    }
}

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut v = vec![root.join("README.md")];
    files(&root.join("docs"), ".md", &mut v);
    v.sort();
    v
}

fn shown(p: &Path) -> String {
    p.strip_prefix(workspace_root())
        .unwrap_or(p)
        .display()
        .to_string()
}

/// The lines of a page outside fenced code blocks, with inline code
/// spans removed: what may hold a link or a heading.
fn prose(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = vec![];
    for (i, l) in text.lines().enumerate() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            let outside_code: String = l.split('`').step_by(2).collect::<Vec<_>>().join("");
            out.push((i + 1, outside_code));
        }
    }
    out
}

/// The link targets of a page (inline links), by line.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    for (n, l) in prose(text) {
        let mut rest = l.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(j) = rest.find(')') {
                out.push((n, rest[..j].trim().to_string()));
                rest = &rest[j..];
            }
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped (but
/// `-` and `_`), spaces as `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (a repeated heading's get `-1`, `-2`).
fn anchors(text: &str) -> BTreeSet<String> {
    // Headings may hold code spans: read them from the raw line, outside
    // fences only.
    let mut fenced = false;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for l in text.lines() {
        if l.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !l.starts_with('#') {
            continue;
        }
        let s = slug(l.trim_start_matches('#'));
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// `base` joined with a relative `target`, `.` and `..` resolved.
fn resolve(base: &Path, target: &str) -> PathBuf {
    let mut p = base.to_path_buf();
    for c in Path::new(target).components() {
        match c {
            Component::ParentDir => {
                p.pop();
            }
            Component::CurDir => {}
            c => p.push(c),
        }
    }
    p
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

#[test]
fn the_readme_is_a_first_page_that_starts_with_the_two_commands() {
    let text = fs::read_to_string(workspace_root().join("README.md")).unwrap();
    let n = text.lines().count();
    assert!(
        n <= README_MAX_LINES,
        "README.md has {n} lines, more than {README_MAX_LINES}: move reference to docs/"
    );
    // The first two code blocks are the demo and the test command.
    let blocks: Vec<&str> = text
        .split("```")
        .skip(1)
        .step_by(2)
        .take(2)
        .map(|b| b.split_once('\n').map_or("", |(_, body)| body).trim())
        .collect();
    assert_eq!(blocks, ["cargo xtask demo", "cargo xtask test"]);
}

#[test]
fn every_page_is_linked_from_the_readme_or_another_page() {
    let mut linked = BTreeSet::new();
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for (_, target) in links(&text) {
            if is_external(&target) || target.starts_with('#') {
                continue;
            }
            let file = target.split('#').next().unwrap_or("");
            let to = resolve(page.parent().unwrap(), file);
            if to != page {
                linked.insert(to);
            }
        }
    }
    let orphans: Vec<String> = pages()
        .iter()
        .skip(1)
        .filter(|p| !linked.contains(*p))
        .map(|p| shown(p))
        .collect();
    assert!(
        orphans.is_empty(),
        "pages no other page links to: {orphans:?}"
    );
}

#[test]
fn every_relative_link_resolves() {
    let mut bad = vec![];
    for page in pages() {
        let text = fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            if is_external(&target) {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let to = if file.is_empty() {
                page.clone()
            } else {
                resolve(page.parent().unwrap(), file)
            };
            let at = format!("{}:{line}: {target}", shown(&page));
            if !to.exists() {
                bad.push(format!("{at}: no such file"));
                continue;
            }
            if let Some(a) = anchor {
                let heads = fs::read_to_string(&to)
                    .map(|t| anchors(&t))
                    .unwrap_or_default();
                if !heads.contains(a) {
                    bad.push(format!("{at}: no heading #{a} in {}", shown(&to)));
                }
            }
        }
    }
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

/// Where a line names a tracker's number ("issue" and a number, as a
/// word) or the design notes kept outside the repository.
fn outside_reference(line: &str) -> bool {
    let l = line.to_lowercase();
    let notes = ["design", ".md"].concat();
    if l.contains(&notes) {
        return true;
    }
    let word = "issue ";
    l.match_indices(word).any(|(i, _)| {
        let before = l[..i].chars().next_back();
        let after = l[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && after.is_some_and(|c| c.is_ascii_digit())
    })
}

#[test]
fn outside_references_are_recognised() {
    assert!(outside_reference(&format!(
        "// as the {} target says",
        ["Issue", " 14"].concat()
    )));
    assert!(outside_reference(&format!(
        "(see {} section 1)",
        ["DESIGN", ".md"].concat()
    )));
    assert!(!outside_reference("block_rq_issue 97 ns x 1.00"));
    assert!(!outside_reference("the issue probe reads no clock"));
    assert!(!outside_reference("an issue of 4 KiB"));
}

#[test]
fn no_rust_file_cites_a_tracker_number_or_an_outside_document() {
    let mut sources = vec![];
    files(&workspace_root(), ".rs", &mut sources);
    sources.sort();
    assert!(sources.len() > 50, "{} Rust files", sources.len());
    let mut found = vec![];
    for f in &sources {
        let Ok(text) = fs::read_to_string(f) else {
            continue;
        };
        for (i, l) in text.lines().enumerate() {
            if outside_reference(l) {
                found.push(format!("{}:{}: {}", shown(f), i + 1, l.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "say why in the present tense, without a tracker number or a document outside the \
         repository:\n{}",
        found.join("\n")
    );
}

#[test]
fn headings_become_github_anchors() {
    assert_eq!(slug(" `pathpilot log`"), "pathpilot-log");
    assert_eq!(slug(" `[filter]`"), "filter");
    assert_eq!(
        slug(" `maps.path_grouping_policy`"),
        "mapspath_grouping_policy"
    );
    assert_eq!(
        slug(" How bench mpath measures"),
        "how-bench-mpath-measures"
    );
    let a = anchors("# A\n```\n# not a heading\n```\n## B c\n## B c\n");
    assert_eq!(
        a,
        ["a", "b-c", "b-c-1"]
            .map(String::from)
            .into_iter()
            .collect()
    );
    assert_eq!(
        links("see [x](a.md#b) and `[y](not.md)`\n```\n[z](c.md)\n```\n"),
        [(1, "a.md#b".to_string())]
    );
}
