//! Feeds arbitrary text to the table and status parsers.
//!
//! Invariants: no panic; whatever parses renders back to the input's tokens
//! joined by single spaces (the parsers accept only forms they can
//! reproduce), and the rendering parses to the same model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathpilot::mpath::{MultipathStatus, MultipathTable};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let norm = s.split_ascii_whitespace().collect::<Vec<_>>().join(" ");

    if let Ok(t) = MultipathTable::parse_line(s) {
        let out = t.render_line();
        assert_eq!(out, norm);
        assert_eq!(MultipathTable::parse_line(&out), Ok(t));
    }
    if let Ok(t) = MultipathTable::parse_params(0, 1, s) {
        let out = t.render_params();
        assert_eq!(out, norm);
        assert_eq!(MultipathTable::parse_params(0, 1, &out), Ok(t));
    }
    if let Ok(st) = MultipathStatus::parse_line(s) {
        let out = st.render_line();
        assert_eq!(out, norm);
        assert_eq!(MultipathStatus::parse_line(&out), Ok(st));
    }
    if let Ok(st) = MultipathStatus::parse_params(0, 1, s) {
        let out = st.render_params();
        assert_eq!(out, norm);
        assert_eq!(MultipathStatus::parse_params(0, 1, &out), Ok(st));
    }
});
