//! Feeds arbitrary bytes to the control socket's request parser, line by
//! line as the daemon splits them, and the whole input as one line.
//!
//! Invariants: no panic; a request that parses serialises back to JSON
//! that parses to the same request; a refusal is a `bad_request` with a
//! message, and every response encodes to one JSON line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pathpilot::ctl::protocol::{self, ErrorCode, MAX_LINE};

fn one(line: &str) {
    match protocol::parse(line) {
        Ok(req) => {
            let _ = req.is_change();
            let json = serde_json::to_string(&req).expect("a request serialises");
            assert_eq!(protocol::parse(&json).ok(), Some(req), "{json}");
        }
        Err(resp) => {
            assert!(!resp.ok);
            assert_eq!(resp.code, Some(ErrorCode::BadRequest));
            assert!(resp.error.as_deref().is_some_and(|e| !e.is_empty()));
            let out = serde_json::to_string(&resp).expect("a response serialises");
            assert!(!out.contains('\n'));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() > MAX_LINE {
        return; // the socket refuses longer lines before parsing
    }
    for line in data.split(|b| *b == b'\n') {
        // Not UTF-8 is refused by the socket before it gets here.
        if let Ok(s) = std::str::from_utf8(line)
            && !s.trim().is_empty()
        {
            one(s.trim_end_matches('\r'));
        }
    }
    if let Ok(s) = std::str::from_utf8(data) {
        one(s);
    }
});
