//! Feeds arbitrary text to the daemon's config parser.
//!
//! Invariants: no panic; an error says something; a config that parses yields the durations and filter the engine
//! builds from it without panicking (`Duration::from_secs_f64` panics on
//! negative or NaN values, so the range checks must have caught them).
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use pathpilot::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(s) {
        Ok(c) => {
            let _ = c.window();
            let _ = Duration::from_secs_f64(c.checker.interval_secs);
            let _ = Duration::from_secs_f64(c.checker.timeout_secs);
            let _ = c.tuner();
            assert!(c.filter().is_ok(), "a checked config has a valid filter");
            if let Some(s) = c.maps.no_path_retry_secs {
                assert!((0.0..=86400.0).contains(&s));
            }
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
