//! multipath.conf's syntax, as multipath-tools' parser reads it
//! (`libmpathutil/parser.c`), into a tree of sections and `key value`
//! entries, and back to text in the shape `multipath -t` prints.
//!
//! - The file is read line by line; a section opens with `name {` on one
//!   line and closes with a `}` line.
//! - A value is the word after the key, or a double-quoted string (`""`
//!   inside one is a literal quote); only one value per line.
//! - `#` and `!` start a comment anywhere outside a quoted string (so a
//!   regex starting with `!` must be quoted, as in `devnode "!^sd"`).
//! - `{` and `}` are tokens of their own outside quotes.
//!
//! multipath-tools logs most mistakes and carries on, which can silently
//! turn a section into part of another; this parser refuses them with the
//! line, so that a map is never built from a file it misread.
use std::fmt;

/// A value as written: the text, and whether it was quoted (`multipath
/// -t` quotes strings and leaves numbers bare; rendering keeps the form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub text: String,
    pub quoted: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: String,
    pub value: Value,
    /// 1-based line in its file.
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub name: String,
    pub line: usize,
    pub items: Vec<Item>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Item {
    Entry(Entry),
    Section(Section),
}

/// A whole file: its top-level items.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Document {
    pub items: Vec<Item>,
}

/// A mistake in the file, with its line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {msg}")]
pub struct SyntaxError {
    pub line: usize,
    pub msg: String,
}

/// The keywords that are only ever sections: written without `{` they
/// are a mistake, not a key without a value. (`protocol` is a section in
/// `overrides` and a key in a blacklist.)
pub const SECTIONS: &[&str] = &[
    "defaults",
    "blacklist",
    "blacklist_exceptions",
    "devices",
    "device",
    "overrides",
    "multipaths",
    "multipath",
];

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Word(String),
    Quote,
    Open,
    Close,
}

impl Token {
    fn show(&self) -> String {
        match self {
            Token::Word(w) => w.clone(),
            Token::Quote => "\"".into(),
            Token::Open => "{".into(),
            Token::Close => "}".into(),
        }
    }
}

/// The tokens of one line, as `alloc_strvec` splits it: quote marks are
/// tokens of their own, a quoted string is one word (possibly empty and
/// then absent), and a comment ends the line.
fn tokens(line: &str) -> Vec<Token> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut in_string = false;
    let skip_blank = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_ascii_whitespace() || !b[*i].is_ascii()) {
            *i += 1;
        }
    };
    skip_blank(&mut i);
    if i >= b.len() || b[i] == b'#' || b[i] == b'!' {
        return out;
    }
    while i < b.len() {
        if b[i] == b'"' && !(in_string && b.get(i + 1) == Some(&b'"')) {
            out.push(Token::Quote);
            in_string = !in_string;
            i += 1;
        } else if !in_string && (b[i] == b'{' || b[i] == b'}') {
            out.push(if b[i] == b'{' {
                Token::Open
            } else {
                Token::Close
            });
            i += 1;
        } else {
            let mut word = Vec::new();
            while i < b.len() {
                let c = b[i];
                if in_string {
                    if c == b'"' {
                        // `""` inside a string is a literal quote.
                        if b.get(i + 1) == Some(&b'"') {
                            word.push(b'"');
                            i += 2;
                            continue;
                        }
                        break;
                    }
                } else if c.is_ascii_whitespace()
                    || !c.is_ascii()
                    || matches!(c, b'!' | b'#' | b'{' | b'}' | b'"')
                {
                    break;
                }
                word.push(c);
                i += 1;
            }
            out.push(Token::Word(String::from_utf8_lossy(&word).into_owned()));
        }
        if !in_string {
            skip_blank(&mut i);
        }
        if i >= b.len() || (!in_string && (b[i] == b'#' || b[i] == b'!')) {
            break;
        }
    }
    out
}

/// What one line is.
enum Line {
    Blank,
    Open(String),
    Close,
    Entry(String, Value),
}

fn line_of(toks: Vec<Token>, n: usize) -> Result<Line, SyntaxError> {
    let err = |msg: String| Err(SyntaxError { line: n, msg });
    let extra = |after: &str, t: &Token| {
        err(format!(
            "unexpected '{}' after {after} (one value per line)",
            t.show()
        ))
    };
    let mut it = toks.into_iter();
    let Some(first) = it.next() else {
        return Ok(Line::Blank);
    };
    let rest: Vec<Token> = it.collect();
    let key = match first {
        Token::Close => {
            return match rest.first() {
                None => Ok(Line::Close),
                Some(t) => extra("'}'", t),
            };
        }
        Token::Open => return err("'{' without a section name before it".into()),
        Token::Quote => return err("a line starts with a quoted string, not a keyword".into()),
        Token::Word(w) => w,
    };
    match rest.as_slice() {
        [] if SECTIONS.contains(&key.as_str()) => err(format!(
            "'{key}' is a section: '{{' must follow it on the same line"
        )),
        [] => err(format!("'{key}' has no value")),
        [Token::Open] => Ok(Line::Open(key)),
        [Token::Open, t, ..] => extra(&format!("'{key} {{'"), t),
        [t, ..] if SECTIONS.contains(&key.as_str()) => err(format!(
            "'{key}' is a section: expected '{{' after it, found '{}'",
            t.show()
        )),
        [Token::Word(v)] => Ok(Line::Entry(
            key,
            Value {
                text: v.clone(),
                quoted: false,
            },
        )),
        [Token::Word(_), t, ..] => extra(&format!("the value of '{key}'"), t),
        [Token::Quote, Token::Quote] => Ok(Line::Entry(
            key,
            Value {
                text: String::new(),
                quoted: true,
            },
        )),
        [Token::Quote, Token::Word(v), Token::Quote] => Ok(Line::Entry(
            key,
            Value {
                text: v.clone(),
                quoted: true,
            },
        )),
        [Token::Quote, Token::Word(_), Token::Quote, t, ..]
        | [Token::Quote, Token::Quote, t, ..] => extra(&format!("the value of '{key}'"), t),
        [Token::Quote] | [Token::Quote, Token::Word(_)] => {
            err(format!("the value of '{key}' has no closing quote"))
        }
        [t, ..] => err(format!("'{key}': unexpected '{}' for a value", t.show())),
    }
}

impl Document {
    /// Parses a whole file.
    pub fn parse(text: &str) -> Result<Document, SyntaxError> {
        // The sections open so far, innermost last.
        let mut stack: Vec<Section> = vec![];
        let mut top: Vec<Item> = vec![];
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let push = |stack: &mut Vec<Section>, top: &mut Vec<Item>, item: Item| match stack
                .last_mut()
            {
                Some(s) => s.items.push(item),
                None => top.push(item),
            };
            match line_of(tokens(raw), n)? {
                Line::Blank => {}
                Line::Open(name) => stack.push(Section {
                    name,
                    line: n,
                    items: vec![],
                }),
                Line::Close => {
                    let s = stack.pop().ok_or_else(|| SyntaxError {
                        line: n,
                        msg: "'}' closes no section".into(),
                    })?;
                    push(&mut stack, &mut top, Item::Section(s));
                }
                Line::Entry(key, value) => push(
                    &mut stack,
                    &mut top,
                    Item::Entry(Entry {
                        key,
                        value,
                        line: n,
                    }),
                ),
            }
        }
        if let Some(s) = stack.last() {
            return Err(SyntaxError {
                line: s.line,
                msg: format!("'{} {{' is never closed (a '}}' is missing)", s.name),
            });
        }
        Ok(Document { items: top })
    }

    /// The text, as `multipath -t` prints a configuration: a tab per
    /// level, strings quoted where they were.
    pub fn render(&self) -> String {
        let mut out = String::new();
        render_items(&self.items, 0, &mut out);
        out
    }

    /// The top-level sections named `name`, in file order.
    pub fn sections<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Section> + 'a {
        sections_in(&self.items, name)
    }
}

impl Section {
    pub fn sections<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Section> + 'a {
        sections_in(&self.items, name)
    }

    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.items.iter().filter_map(|i| match i {
            Item::Entry(e) => Some(e),
            Item::Section(_) => None,
        })
    }
}

fn sections_in<'a>(items: &'a [Item], name: &'a str) -> impl Iterator<Item = &'a Section> + 'a {
    items.iter().filter_map(move |i| match i {
        Item::Section(s) if s.name == name => Some(s),
        _ => None,
    })
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.quoted {
            write!(f, "\"{}\"", self.text.replace('"', "\"\""))
        } else {
            f.write_str(&self.text)
        }
    }
}

fn render_items(items: &[Item], depth: usize, out: &mut String) {
    let indent = "\t".repeat(depth);
    for i in items {
        match i {
            Item::Entry(e) => out.push_str(&format!("{indent}{} {}\n", e.key, e.value)),
            Item::Section(s) => {
                out.push_str(&format!("{indent}{} {{\n", s.name));
                render_items(&s.items, depth + 1, out);
                out.push_str(&format!("{indent}}}\n"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(d: &Document, path: &[&str], key: &str) -> Option<Value> {
        let mut items = &d.items;
        for p in path {
            items = &sections_in(items, p).next()?.items;
        }
        items.iter().find_map(|i| match i {
            Item::Entry(e) if e.key == key => Some(e.value.clone()),
            _ => None,
        })
    }

    #[test]
    fn words_strings_and_comments() {
        let d = Document::parse(
            "# comment\n\
             defaults {   # trailing comment\n\
             \tuser_friendly_names yes ! another\n\
             \tprio_args \"\"\n\
             \tpath_selector \"service-time 0\"\n\
             \tgetuid_callout \"say \"\"hi\"\"\"\n\
             }\n\
             blacklist {\n\
             \tdevnode \"!^(sd[a-z]|nvme[0-9])\"\n\
             \twwid ^36#not a comment in a word? no: a comment\n\
             }\n",
        )
        .unwrap();
        let v = |p: &[&str], k| entry(&d, p, k).unwrap();
        assert_eq!(v(&["defaults"], "user_friendly_names").text, "yes");
        assert!(!v(&["defaults"], "user_friendly_names").quoted);
        assert_eq!(v(&["defaults"], "prio_args").text, "");
        assert_eq!(v(&["defaults"], "path_selector").text, "service-time 0");
        assert_eq!(v(&["defaults"], "getuid_callout").text, "say \"hi\"");
        assert_eq!(v(&["blacklist"], "devnode").text, "!^(sd[a-z]|nvme[0-9])");
        // `#` ends an unquoted word, as in multipath-tools.
        assert_eq!(v(&["blacklist"], "wwid").text, "^36");
        assert_eq!(d.sections("defaults").next().unwrap().line, 2);
    }

    #[test]
    fn braces_need_no_blanks() {
        let d = Document::parse("devices{\ndevice{\nvendor \"X\"\n}}\n");
        // `}}` is two closes on one line: the second is extra data.
        assert_eq!(
            d.unwrap_err().to_string(),
            "line 4: unexpected '}' after '}' (one value per line)"
        );
        let d = Document::parse("devices{\ndevice{\nvendor \"X\"\n}\n}\n").unwrap();
        assert_eq!(
            entry(&d, &["devices", "device"], "vendor").unwrap().text,
            "X"
        );
    }

    #[test]
    fn mistakes_name_their_line() {
        let cases = [
            (
                "defaults {\n\tuser_friendly_names yes\n",
                "line 1: 'defaults {' is never closed (a '}' is missing)",
            ),
            ("defaults {\n}\n}\n", "line 3: '}' closes no section"),
            (
                "defaults\n{\n}\n",
                "line 1: 'defaults' is a section: '{' must follow it on the same line",
            ),
            ("blacklist {\n\twwid\n}\n", "line 2: 'wwid' has no value"),
            (
                "blacklist {\n\twwid \"^36\n}\n",
                "line 2: the value of 'wwid' has no closing quote",
            ),
            (
                "defaults {\n\tprio alua const\n}\n",
                "line 2: unexpected 'const' after the value of 'prio' (one value per line)",
            ),
            (
                "devices [\n",
                "line 1: 'devices' is a section: expected '{' after it, found '['",
            ),
            ("{\n", "line 1: '{' without a section name before it"),
        ];
        for (text, want) in cases {
            assert_eq!(
                Document::parse(text).unwrap_err().to_string(),
                want,
                "{text:?}"
            );
        }
    }

    #[test]
    fn renders_as_multipath_t_prints() {
        let text = "defaults {\n\tverbosity 2\n\tpath_selector \"service-time 0\"\n}\n\
                    overrides {\n}\n\
                    blacklist {\n\tdevnode \"!^(sd[a-z])\"\n\tdevice {\n\t\tvendor \"SGI\"\n\t\tproduct \"\"\"q\"\"\"\n\t}\n}\n";
        let d = Document::parse(text).unwrap();
        assert_eq!(d.render(), text);
        assert_eq!(Document::parse(&d.render()).unwrap(), d);
    }
}
