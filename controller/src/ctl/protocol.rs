//! The control socket's protocol: one JSON object per line each way.
//!
//! Request: `{"cmd": "status"}`, `{"cmd": "log", "since": 12}`,
//! `{"cmd": "pause", "map": "mpatha"}`, ... (see [`ControlRequest`]).
//! Response: `{"ok": true, "data": ...}` or
//! `{"ok": false, "code": "not_found", "error": "no map 'mpathz'"}`.
use serde::{Deserialize, Serialize};

use crate::tuner::{Knob, Mode};

/// The longest request line accepted; longer lines get an error and the
/// connection is closed (a client must not make the daemon buffer forever).
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum ControlRequest {
    /// Everything: maps, paths, figures, tuner states, recent decisions.
    Status,
    /// Decisions with a sequence number above `since` (all kept if absent).
    Log {
        #[serde(default)]
        since: Option<u64>,
    },
    /// Stop tuning a map (the figures and the checker go on).
    Pause {
        map: String,
    },
    Resume {
        map: String,
    },
    /// Fail or reinstate a path by kernel name or maj:min (dm message).
    Fail {
        path: String,
    },
    Reinstate {
        path: String,
    },
    /// End a path's marginal state (or probation): it serves again.
    Unmark {
        path: String,
    },
    /// Change the tuner mode of one map, or of all when `map` is absent.
    Mode {
        mode: Mode,
        #[serde(default)]
        map: Option<String>,
    },
    /// An operator's table change (`pathpilot reload`): `table` replaces
    /// the live table if it still is `expect` (the table the command
    /// planned from), and the knobs it changes are pinned.
    Reload {
        map: String,
        expect: String,
        table: String,
    },
    /// An operator's queue knobs (`pathpilot set`): `target` is a map or a
    /// path, `settings` are `knob=value`; the knobs are pinned.
    Set {
        target: String,
        settings: Vec<String>,
    },
    /// Hand pinned knobs back to the tuner (all of the map's when `knobs`
    /// is absent or empty).
    Release {
        map: String,
        #[serde(default)]
        knobs: Vec<Knob>,
    },
    /// multipathd's maps pass to the daemon (`pathpilot takeover`): all of
    /// them, or `map` when it is multipathd's only one.
    Takeover {
        #[serde(default)]
        map: Option<String>,
    },
    /// The daemon's maps pass to multipathd (`pathpilot handback`).
    Handback {
        #[serde(default)]
        map: Option<String>,
    },
}

impl ControlRequest {
    /// Whether the request changes anything (root only).
    pub fn is_change(&self) -> bool {
        !matches!(self, ControlRequest::Status | ControlRequest::Log { .. })
    }

    /// How long the engine may take to answer: a handover waits for
    /// multipathd to stop or start.
    pub fn engine_timeout(&self) -> std::time::Duration {
        match self {
            ControlRequest::Takeover { .. } | ControlRequest::Handback { .. } => {
                std::time::Duration::from_secs(60)
            }
            _ => std::time::Duration::from_secs(10),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not JSON, unknown command, missing or bad field, line too long.
    BadRequest,
    /// The peer may not do this (not root, or not in the read group).
    Forbidden,
    /// No such map or path.
    NotFound,
    /// The kernel refused (message EBUSY while suspended, ...).
    Kernel,
    /// The daemon is stopping or the engine did not answer in time.
    Unavailable,
    /// The map is not the daemon's to change (it only observes it): the
    /// command changes it itself.
    NotManaged,
    /// The map changed since the command read it: plan again.
    Conflict,
    /// Another writer holds the map's lock.
    Busy,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<ErrorCode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Response {
    pub fn ok(data: serde_json::Value) -> Self {
        Response {
            ok: true,
            data: Some(data),
            code: None,
            error: None,
        }
    }

    pub fn err(code: ErrorCode, msg: impl Into<String>) -> Self {
        Response {
            ok: false,
            data: None,
            code: Some(code),
            error: Some(msg.into()),
        }
    }
}

/// Parses one request line, with an error a client can act on.
pub fn parse(line: &str) -> Result<ControlRequest, Response> {
    serde_json::from_str(line).map_err(|e| {
        let what = if serde_json::from_str::<serde_json::Value>(line).is_err() {
            format!("not JSON: {e}")
        } else {
            format!("bad request: {e}")
        };
        Response::err(ErrorCode::BadRequest, what)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(
            parse(r#"{"cmd":"status"}"#).unwrap(),
            ControlRequest::Status
        );
        assert_eq!(
            parse(r#"{"cmd":"pause","map":"mpatha"}"#).unwrap(),
            ControlRequest::Pause {
                map: "mpatha".into()
            }
        );
        assert_eq!(
            parse(r#"{"cmd":"mode","mode":"advise"}"#).unwrap(),
            ControlRequest::Mode {
                mode: Mode::Advise,
                map: None
            }
        );
        assert!(parse(r#"{"cmd":"log"}"#).is_ok());
        assert_eq!(
            parse(r#"{"cmd":"release","map":"mpatha","knobs":["selector","max_sectors_kb"]}"#)
                .unwrap(),
            ControlRequest::Release {
                map: "mpatha".into(),
                knobs: vec![Knob::Selector, Knob::MaxSectorsKb]
            }
        );
        assert_eq!(
            parse(r#"{"cmd":"release","map":"mpatha"}"#).unwrap(),
            ControlRequest::Release {
                map: "mpatha".into(),
                knobs: vec![]
            }
        );
        assert!(parse(r#"{"cmd":"set","target":"sdb","settings":["queue_depth=4"]}"#).is_ok());
        assert!(parse(r#"{"cmd":"reload","map":"m","expect":"a","table":"b"}"#).is_ok());
        assert_eq!(
            parse(r#"{"cmd":"unmark","path":"sdb"}"#).unwrap(),
            ControlRequest::Unmark { path: "sdb".into() }
        );
    }

    #[test]
    fn bad_requests_say_why() {
        let e = parse("hello").unwrap_err();
        assert_eq!(e.code, Some(ErrorCode::BadRequest));
        assert!(e.error.unwrap().starts_with("not JSON"));
        let e = parse(r#"{"cmd":"explode"}"#).unwrap_err();
        assert!(
            e.error.unwrap().contains("unknown variant"),
            "names the bad command"
        );
        let e = parse(r#"{"cmd":"pause"}"#).unwrap_err();
        assert!(e.error.unwrap().contains("map"));
        let e = parse(r#"{"cmd":"pause","map":"a","extra":1}"#).unwrap_err();
        assert!(e.error.unwrap().contains("extra"));
    }

    /// One request of every kind. The match fails to compile when a kind
    /// is added, so that it is added here, and to the page, too.
    fn every_kind() -> Vec<ControlRequest> {
        let all = vec![
            ControlRequest::Status,
            ControlRequest::Log { since: None },
            ControlRequest::Pause { map: "m".into() },
            ControlRequest::Resume { map: "m".into() },
            ControlRequest::Fail { path: "p".into() },
            ControlRequest::Reinstate { path: "p".into() },
            ControlRequest::Unmark { path: "p".into() },
            ControlRequest::Mode {
                mode: Mode::Tune,
                map: None,
            },
            ControlRequest::Reload {
                map: "m".into(),
                expect: "a".into(),
                table: "b".into(),
            },
            ControlRequest::Set {
                target: "m".into(),
                settings: vec![],
            },
            ControlRequest::Release {
                map: "m".into(),
                knobs: vec![],
            },
            ControlRequest::Takeover { map: None },
            ControlRequest::Handback { map: None },
        ];
        for r in &all {
            match r {
                ControlRequest::Status
                | ControlRequest::Log { .. }
                | ControlRequest::Pause { .. }
                | ControlRequest::Resume { .. }
                | ControlRequest::Fail { .. }
                | ControlRequest::Reinstate { .. }
                | ControlRequest::Unmark { .. }
                | ControlRequest::Mode { .. }
                | ControlRequest::Reload { .. }
                | ControlRequest::Set { .. }
                | ControlRequest::Release { .. }
                | ControlRequest::Takeover { .. }
                | ControlRequest::Handback { .. } => {}
            }
        }
        all
    }

    /// The name a request or an error code has on the wire.
    fn wire_name<T: Serialize>(x: &T) -> String {
        match serde_json::to_value(x).unwrap() {
            serde_json::Value::String(s) => s,
            v => v["cmd"].as_str().unwrap().to_string(),
        }
    }

    /// docs/control-socket.md shows every request, each as a line that
    /// parses, and every error code; and nothing the protocol lacks.
    #[test]
    fn the_control_socket_page_shows_every_request_and_error() {
        let page = include_str!("../../../docs/control-socket.md");
        // The requests' table: rows whose first cell is a request line.
        let documented: std::collections::BTreeSet<String> = page
            .lines()
            .filter_map(|l| l.strip_prefix("| `{"))
            .map(|l| {
                let line = format!("{{{}", l.split("` |").next().unwrap());
                let r = parse(&line).unwrap_or_else(|e| panic!("{line}: {e:?}"));
                assert!(
                    serde_json::to_string(&r).is_ok(),
                    "{line} does not round-trip"
                );
                wire_name(&r)
            })
            .collect();
        let all: std::collections::BTreeSet<String> = every_kind().iter().map(wire_name).collect();
        assert_eq!(
            documented, all,
            "the page's requests against the protocol's"
        );
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::Forbidden,
            ErrorCode::NotFound,
            ErrorCode::Kernel,
            ErrorCode::Unavailable,
            ErrorCode::NotManaged,
            ErrorCode::Conflict,
            ErrorCode::Busy,
        ] {
            // The match fails to compile when a code is added.
            match code {
                ErrorCode::BadRequest
                | ErrorCode::Forbidden
                | ErrorCode::NotFound
                | ErrorCode::Kernel
                | ErrorCode::Unavailable
                | ErrorCode::NotManaged
                | ErrorCode::Conflict
                | ErrorCode::Busy => {}
            }
            let row = format!("| `{}` |", wire_name(&code));
            assert!(page.contains(&row), "docs/control-socket.md has no {row:?}");
        }
    }

    #[test]
    fn changes_are_marked() {
        assert!(!ControlRequest::Status.is_change());
        assert!(!ControlRequest::Log { since: None }.is_change());
        assert!(ControlRequest::Fail { path: "sda".into() }.is_change());
        assert!(ControlRequest::Unmark { path: "sda".into() }.is_change());
    }
}
