//! The dashboard's interaction state and key handling, kept apart from
//! drawing so both are tested without a terminal.
use crate::model::Model;

/// Keys the dashboard understands (decoupled from the terminal library).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Up,
    Down,
    Left,
    Right,
    Tab,
    BackTab,
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: quits from anywhere, a filter being typed included.
    Interrupt,
    Char(char),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pane {
    #[default]
    Maps,
    Paths,
    Decisions,
}

impl Pane {
    fn next(self) -> Self {
        match self {
            Pane::Maps => Pane::Paths,
            Pane::Paths => Pane::Decisions,
            Pane::Decisions => Pane::Maps,
        }
    }
    fn prev(self) -> Self {
        self.next().next()
    }
}

/// What the user asked the controller to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Quit,
    /// Pause the tuner on this map, or resume it when paused.
    TogglePause {
        map: String,
    },
    FailPath {
        map: String,
        path: String,
    },
    ReinstatePath {
        map: String,
        path: String,
    },
}

/// A change that needs a yes before it is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Confirm {
    pub question: String,
    pub request: Request,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Ui {
    pub pane: Pane,
    pub map: usize,
    pub path: usize,
    pub decision_scroll: usize,
    pub help: bool,
    pub confirm: Option<Confirm>,
    /// One line of feedback (result of the last request, or why not).
    pub message: Option<String>,
    /// Shows only the maps whose name, WWID or dm device contains this
    /// (any case); empty shows every map.
    pub filter: String,
    /// Keys go to the filter (after `/`) until Enter or Esc.
    pub editing_filter: bool,
}

impl Ui {
    /// The model as shown: only the maps the filter matches and their
    /// decisions. Selection indexes and requests refer to this model.
    pub fn shown(&self, m: &Model) -> Model {
        if self.filter.is_empty() {
            return m.clone();
        }
        let f = self.filter.to_lowercase();
        let hit = |s: &str| s.to_lowercase().contains(&f);
        let maps: Vec<_> = m
            .maps
            .iter()
            .filter(|x| hit(&x.name) || hit(&x.wwid) || hit(&x.dm_dev))
            .cloned()
            .collect();
        Model {
            source: m.source.clone(),
            interval_s: m.interval_s,
            hidden_maps: m.maps.len() - maps.len(),
            decisions: m
                .decisions
                .iter()
                .filter(|d| maps.iter().any(|x| x.name == d.map))
                .cloned()
                .collect(),
            maps,
            cgroups_not_counted: m.cgroups_not_counted,
        }
    }

    /// Keeps the selection inside the model after it changed (a map or a
    /// path disappeared).
    pub fn clamp(&mut self, m: &Model) {
        self.map = self.map.min(m.maps.len().saturating_sub(1));
        let paths = m.maps.get(self.map).map_or(0, |x| x.paths.len());
        self.path = self.path.min(paths.saturating_sub(1));
        self.decision_scroll = self
            .decision_scroll
            .min(m.decisions.len().saturating_sub(1));
    }

    /// Applies a key; returns a request for the controller when the key
    /// asks for one (after confirmation, for path changes).
    pub fn key(&mut self, k: Key, m: &Model) -> Option<Request> {
        if k == Key::Interrupt {
            return Some(Request::Quit);
        }
        if let Some(c) = self.confirm.take() {
            return match k {
                Key::Char('y') | Key::Char('Y') | Key::Enter => Some(c.request),
                _ => {
                    self.message = Some("cancelled".into());
                    None
                }
            };
        }
        if self.editing_filter {
            match k {
                Key::Enter => self.editing_filter = false,
                Key::Esc => {
                    self.editing_filter = false;
                    self.filter.clear();
                }
                Key::Backspace => {
                    self.filter.pop();
                }
                Key::Char(c) if !c.is_control() => self.filter.push(c),
                _ => {}
            }
            // The selection starts over in the new list.
            self.map = 0;
            self.path = 0;
            self.decision_scroll = 0;
            return None;
        }
        if self.help {
            // Any key closes the help; q still quits.
            self.help = false;
            return (k == Key::Char('q')).then_some(Request::Quit);
        }
        let map = m.maps.get(self.map);
        match k {
            Key::Char('q') | Key::Esc => return Some(Request::Quit),
            Key::Char('?') => self.help = true,
            Key::Char('/') => self.editing_filter = true,
            Key::Tab => self.pane = self.pane.next(),
            Key::BackTab => self.pane = self.pane.prev(),
            Key::Up | Key::Left => self.move_by(-1, m),
            Key::Down | Key::Right => self.move_by(1, m),
            Key::Char('p') => {
                let map = map?;
                return Some(Request::TogglePause {
                    map: map.name.clone(),
                });
            }
            Key::Char(c @ ('f' | 'r')) => {
                let map = map?;
                let Some(path) = map.paths.get(self.path) else {
                    self.message = Some(format!("{} has no paths", map.name));
                    return None;
                };
                let (verb, request) = if c == 'f' {
                    (
                        "fail",
                        Request::FailPath {
                            map: map.name.clone(),
                            path: path.device.clone(),
                        },
                    )
                } else {
                    (
                        "reinstate",
                        Request::ReinstatePath {
                            map: map.name.clone(),
                            path: path.device.clone(),
                        },
                    )
                };
                self.confirm = Some(Confirm {
                    question: format!("{verb} path {} of {}? (y/n)", path.device, map.name),
                    request,
                });
            }
            _ => {}
        }
        None
    }

    fn move_by(&mut self, d: isize, m: &Model) {
        let step = |v: usize, len: usize| -> usize {
            if len == 0 {
                return 0;
            }
            (v as isize + d).clamp(0, len as isize - 1) as usize
        };
        match self.pane {
            Pane::Maps => {
                let before = self.map;
                self.map = step(self.map, m.maps.len());
                if before != self.map {
                    self.path = 0;
                }
            }
            Pane::Paths => {
                let n = m.maps.get(self.map).map_or(0, |x| x.paths.len());
                self.path = step(self.path, n);
            }
            Pane::Decisions => self.decision_scroll = step(self.decision_scroll, m.decisions.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MapView, PathView};

    fn model() -> Model {
        let path = |d: &str| PathView {
            device: d.into(),
            ..Default::default()
        };
        Model {
            maps: vec![
                MapView {
                    name: "mpatha".into(),
                    paths: vec![path("sda"), path("sdb")],
                    ..Default::default()
                },
                MapView {
                    name: "mpathb".into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn arrows_move_in_the_focused_pane() {
        let m = model();
        let mut ui = Ui::default();
        ui.key(Key::Tab, &m);
        assert_eq!(ui.pane, Pane::Paths);
        ui.key(Key::Down, &m);
        ui.key(Key::Down, &m);
        assert_eq!(ui.path, 1, "stops at the last path");
        ui.key(Key::BackTab, &m);
        ui.key(Key::Down, &m);
        assert_eq!(
            (ui.map, ui.path),
            (1, 0),
            "a new map starts at its first path"
        );
        ui.key(Key::Up, &m);
        ui.key(Key::Up, &m);
        assert_eq!(ui.map, 0);
    }

    #[test]
    fn fail_needs_a_yes() {
        let m = model();
        let mut ui = Ui {
            pane: Pane::Paths,
            ..Default::default()
        };
        ui.key(Key::Down, &m);
        assert_eq!(ui.key(Key::Char('f'), &m), None);
        assert!(
            ui.confirm
                .as_ref()
                .unwrap()
                .question
                .contains("fail path sdb of mpatha")
        );
        assert_eq!(
            ui.key(Key::Char('y'), &m),
            Some(Request::FailPath {
                map: "mpatha".into(),
                path: "sdb".into()
            })
        );
        ui.key(Key::Char('r'), &m);
        assert_eq!(ui.key(Key::Char('n'), &m), None);
        assert_eq!(ui.message.as_deref(), Some("cancelled"));
        assert!(ui.confirm.is_none());
    }

    #[test]
    fn a_map_without_paths_cannot_fail_one() {
        let m = model();
        let mut ui = Ui {
            map: 1,
            ..Default::default()
        };
        assert_eq!(ui.key(Key::Char('f'), &m), None);
        assert!(ui.confirm.is_none());
        assert_eq!(ui.message.as_deref(), Some("mpathb has no paths"));
    }

    #[test]
    fn pause_help_quit() {
        let m = model();
        let mut ui = Ui::default();
        assert_eq!(
            ui.key(Key::Char('p'), &m),
            Some(Request::TogglePause {
                map: "mpatha".into()
            })
        );
        ui.key(Key::Char('?'), &m);
        assert!(ui.help);
        ui.key(Key::Char('x'), &m);
        assert!(!ui.help, "any key closes help");
        assert_eq!(ui.key(Key::Char('q'), &m), Some(Request::Quit));
        assert_eq!(Ui::default().key(Key::Char('p'), &Model::default()), None);
    }

    #[test]
    fn clamp_follows_a_shrinking_model() {
        let mut m = model();
        let mut ui = Ui {
            map: 1,
            path: 5,
            ..Default::default()
        };
        m.maps.truncate(1);
        ui.clamp(&m);
        assert_eq!((ui.map, ui.path), (0, 1));
    }
}
