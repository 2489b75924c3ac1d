//! The terminal loop: refresh the model every interval, redraw on keys and
//! resizes, hand requests to the caller. The terminal is restored on every
//! exit path, panics included (ratatui's init installs that hook).
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::{
    app::{Key, Request, Ui},
    model::Model,
    view,
};

/// What feeds the dashboard.
pub trait Source {
    /// The figures of the interval that just ended.
    fn refresh(&mut self) -> Result<Model, String>;
    /// Carries out a request; the text is shown in the footer.
    fn request(&mut self, r: &Request) -> String;
}

fn key(code: KeyCode, mods: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Up => Key::Up,
        KeyCode::Down => Key::Down,
        KeyCode::Left => Key::Left,
        KeyCode::Right => Key::Right,
        KeyCode::Tab => Key::Tab,
        KeyCode::BackTab => Key::BackTab,
        KeyCode::Enter => Key::Enter,
        KeyCode::Esc => Key::Esc,
        KeyCode::Backspace => Key::Backspace,
        KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Char(c) => Key::Char(c),
        _ => return None,
    })
}

/// Runs the dashboard until quit; `ui` is the starting state (a filter
/// given on the command line).
pub fn run(source: &mut dyn Source, interval: Duration, ui: Ui) -> std::io::Result<()> {
    let mut terminal = ratatui::init();
    let mut ui = ui;
    let res = (|| {
        let mut model = Model::default();
        let mut next = Instant::now();
        loop {
            if Instant::now() >= next {
                match source.refresh() {
                    Ok(m) => model = m,
                    Err(e) => ui.message = Some(e),
                }
                ui.clamp(&ui.shown(&model));
                next += interval;
                if next < Instant::now() {
                    next = Instant::now() + interval;
                }
            }
            terminal.draw(|f| view::draw(f, &model, &ui))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                match event::read()? {
                    Event::Key(k) if k.kind == KeyEventKind::Press => {
                        let Some(k) = key(k.code, k.modifiers) else {
                            continue;
                        };
                        ui.message = None;
                        match ui.key(k, &ui.shown(&model)) {
                            Some(Request::Quit) => return Ok(()),
                            Some(r) => ui.message = Some(source.request(&r)),
                            None => {}
                        }
                    }
                    // A resize just redraws at the new size.
                    _ => {}
                }
            }
        }
    })();
    ratatui::restore();
    res
}
