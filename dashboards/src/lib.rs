//! pathpilot's live terminal dashboard. A view is a pure function of a
//! [`model::Model`] and the [`app::Ui`] state; the terminal loop lives in
//! [`term`], and the controller feeds the model.
pub mod app;
pub mod model;
pub mod term;
pub mod view;

/// Renders one frame to text (no colours), for tests and `--once` output.
pub fn render_text(m: &model::Model, ui: &app::Ui, width: u16, height: u16) -> String {
    let backend = ratatui::backend::TestBackend::new(width, height);
    let mut t = ratatui::Terminal::new(backend).expect("test backend");
    t.draw(|f| view::draw(f, m, ui)).expect("draw");
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..height {
        let mut line = String::new();
        for x in 0..width {
            line.push_str(buf[(x, y)].symbol());
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
