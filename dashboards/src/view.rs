//! Drawing: a pure function of the model and the UI state.
use ratatui::{
    Frame,
    layout::{Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    text::{Line, Span},
    widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState, Wrap},
};

use crate::{
    app::{Pane, Ui},
    model::{MapView, Model, PathView},
};

const HELP: &[&str] = &[
    "arrows   select a map, path or decision (in the focused pane)",
    "         (a selected path shows its latency by request size)",
    "Tab      next pane (Shift-Tab: previous)",
    "/        filter maps by name, WWID or dm device (Enter keeps, Esc clears)",
    "p        pause / resume the tuner on the selected map",
    "f / r    fail / reinstate the selected path (asks first)",
    "?        this help (any key closes it)",
    "q, Esc   quit",
];

/// Draws `m` as the filter shows it (see [`Ui::shown`]).
pub fn draw(f: &mut Frame, m: &Model, ui: &Ui) {
    draw_shown(f, &ui.shown(m), ui)
}

fn draw_shown(f: &mut Frame, m: &Model, ui: &Ui) {
    let area = f.area();
    let map = m.maps.get(ui.map);
    let tall = area.height >= 36;
    // Many maps (a SAN host has dozens) scroll inside their pane.
    let n_maps = m
        .maps
        .len()
        .clamp(1, if area.height >= 50 { 12 } else { 6 }) as u16;
    let n_paths = map.map_or(1, |x| x.paths.len().clamp(1, 8)) as u16;
    let [title, maps, paths, middle, decisions, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(n_maps + 3),
        Constraint::Length(n_paths + 3),
        // Three rows of sparkline per path where there is room; the
        // decision log takes what is left.
        if tall {
            Constraint::Length(n_paths * 3 + 2)
        } else {
            Constraint::Min(0)
        },
        if tall {
            Constraint::Min(6)
        } else {
            Constraint::Length(4)
        },
        Constraint::Length(1),
    ])
    .areas(area);
    draw_title(f, title, m, ui);
    draw_maps(f, maps, m, ui);
    draw_paths(f, paths, map, ui);
    if middle.height >= 3 {
        let path = map
            .filter(|_| ui.pane == Pane::Paths)
            .and_then(|x| x.paths.get(ui.path));
        draw_middle(f, middle, map, path, !m.cgroups_not_counted);
    }
    draw_decisions(f, decisions, m, ui);
    draw_footer(f, footer, ui);
    if ui.help {
        popup(
            f,
            area,
            "help",
            HELP.iter().map(|s| Line::from(*s)).collect(),
        );
    } else if let Some(c) = &ui.confirm {
        popup(f, area, "confirm", vec![Line::from(c.question.as_str())]);
    }
}

fn pane_block(title: String, focused: bool) -> Block<'static> {
    let style = if focused {
        Style::default()
            .fg(Color::Cyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default()
    };
    Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(title, style))
}

fn draw_title(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let n = m.maps.len() + m.hidden_maps;
    let mut s = format!(
        " pathpilot top | {} | every {} | {} map{}",
        m.source,
        secs(m.interval_s),
        n,
        if n == 1 { "" } else { "s" }
    );
    if !ui.filter.is_empty() {
        s.push_str(&format!(" | {} match /{}/", m.maps.len(), ui.filter));
    }
    f.render_widget(
        Paragraph::new(s).style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
    );
}

fn secs(s: f64) -> String {
    if s >= 1.0 && s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{:.0}ms", s * 1000.0)
    }
}

fn num(v: f64) -> String {
    if v >= 10000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn opt_us(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(us) if us >= 10000.0 => format!("{:.0}ms", us / 1000.0),
        Some(us) if us >= 1000.0 => format!("{:.1}ms", us / 1000.0),
        Some(us) => format!("{us:.0}us"),
    }
}

/// The table state that keeps row `sel` of `len` in view in a pane of
/// `area` (borders and a header row take 3 lines); the title's range.
fn scrolled(area: Rect, sel: usize, len: usize) -> (TableState, String) {
    let rows = (area.height.saturating_sub(3) as usize).max(1);
    let first = (sel + 1).saturating_sub(rows).min(len.saturating_sub(rows));
    let range = if len > rows {
        format!("{}-{} of {} ", first + 1, (first + rows).min(len), len)
    } else {
        String::new()
    };
    (TableState::default().with_offset(first), range)
}

fn selected(on: bool) -> Style {
    if on {
        Style::default().add_modifier(Modifier::REVERSED)
    } else {
        Style::default()
    }
}

fn draw_maps(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let (mut state, range) = scrolled(area, ui.map, m.maps.len());
    let block = pane_block(format!(" maps {range}"), ui.pane == Pane::Maps);
    if m.maps.is_empty() {
        let why = if m.hidden_maps > 0 {
            format!(
                "no map matches /{}/ (Esc in the filter clears it)",
                ui.filter
            )
        } else {
            "no multipath maps (pathpilot create, or start the daemon)".into()
        };
        f.render_widget(Paragraph::new(why).block(block), area);
        return;
    }
    let wide = area.width >= 110;
    let rows = m.maps.iter().enumerate().map(|(i, x)| {
        let mut cells = vec![
            Cell::from(x.name.clone()),
            Cell::from(x.wwid.clone()),
            Cell::from(x.selector.clone()),
            Cell::from(Span::styled(x.state.clone(), state_style(&x.state))),
            Cell::from(x.tuner.clone()),
            Cell::from(num(x.iops)),
            Cell::from(num(x.mib_s)),
        ];
        if wide {
            cells.insert(2, Cell::from(x.dm_dev.clone()));
            cells.push(Cell::from(x.features.clone()));
        }
        Row::new(cells).style(selected(i == ui.map))
    });
    // An NAA WWID is 17 characters: keep it whole even at 80 columns.
    let mut widths = vec![
        Constraint::Length(10),
        Constraint::Length(if wide { 34 } else { 17 }),
        Constraint::Length(15),
        Constraint::Length(9),
        // "converged"
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(6),
    ];
    let mut header = vec![
        "NAME", "WWID", "SELECTOR", "STATE", "TUNER", "IOPS", "MiB/s",
    ];
    if wide {
        widths.insert(2, Constraint::Length(6));
        header.insert(2, "DM");
        widths.push(Constraint::Min(10));
        header.push("FEATURES");
    }
    f.render_stateful_widget(
        Table::new(rows, widths)
            .header(Row::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
            .block(block),
        area,
        &mut state,
    );
}

fn state_style(s: &str) -> Style {
    match s {
        "ok" | "active" | "ready" => Style::default().fg(Color::Green),
        // Marginal (set aside) or on probation: sick, still usable.
        "marg" | "prob" => Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD),
        "-" => Style::default(),
        _ => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
    }
}

fn draw_paths(f: &mut Frame, area: Rect, map: Option<&MapView>, ui: &Ui) {
    let (mut state, range) = scrolled(area, ui.path, map.map_or(0, |m| m.paths.len()));
    let title = map.map_or(" paths ".to_string(), |m| {
        format!(" paths of {} {range}", m.name)
    });
    let block = pane_block(title, ui.pane == Pane::Paths);
    let Some(map) = map.filter(|m| !m.paths.is_empty()) else {
        f.render_widget(Paragraph::new("no paths").block(block), area);
        return;
    };
    let wide = area.width >= 110;
    let mut header = vec![
        "DEV", "DM", "CHECK", "IOPS", "MiB/s", "SHARE", "AVGKiB", "MRG%", "P50", "P99", "INFL",
        "W/PG",
    ];
    let mut widths = vec![
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(6),
        Constraint::Length(4),
        Constraint::Length(4),
    ];
    if wide {
        header.insert(1, "H:C:T:L");
        widths.insert(1, Constraint::Length(9));
        header.insert(2, "MAJ:MIN");
        widths.insert(2, Constraint::Length(8));
    }
    let rows = map.paths.iter().enumerate().map(|(i, p)| {
        let mut cells = vec![
            Cell::from(p.device.clone()),
            Cell::from(Span::styled(p.dm_state.clone(), state_style(&p.dm_state))),
            Cell::from(Span::styled(p.checker.clone(), state_style(&p.checker))),
            Cell::from(num(p.iops)),
            Cell::from(num(p.mib_s)),
            Cell::from(format!("{:.0}%", p.share_pct)),
            Cell::from(num(p.avg_kib)),
            Cell::from(format!("{:.0}", p.merge_pct)),
            Cell::from(opt_us(p.lat_p50_us)),
            Cell::from(opt_us(p.lat_p99_us)),
            Cell::from(p.inflight.to_string()),
            Cell::from(p.weight.clone()),
        ];
        if wide {
            cells.insert(1, Cell::from(p.hctl.clone()));
            cells.insert(2, Cell::from(p.dev.clone()));
        }
        Row::new(cells).style(selected(ui.pane == Pane::Paths && i == ui.path))
    });
    f.render_stateful_widget(
        Table::new(rows, widths)
            .header(Row::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
            .column_spacing(1)
            .block(block),
        area,
        &mut state,
    );
}

/// Throughput sparklines per path; on wide screens also the map's size and
/// latency histograms (the selected path's latency by request size when
/// the paths pane has the focus) and cgroup shares.
fn draw_middle(
    f: &mut Frame,
    area: Rect,
    map: Option<&MapView>,
    path: Option<&PathView>,
    cgroups_counted: bool,
) {
    let Some(map) = map else {
        return;
    };
    let (spark_area, hist_area) = if area.width >= 110 {
        let [a, b] = Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
            .areas(area);
        (a, Some(b))
    } else {
        (area, None)
    };
    draw_sparklines(f, spark_area, &map.paths);
    if let Some(h) = hist_area {
        let [sizes, lats, cg] = Layout::horizontal([
            Constraint::Percentage(36),
            Constraint::Percentage(36),
            Constraint::Percentage(28),
        ])
        .areas(h);
        if let Some(p) = path {
            draw_by_size(f, sizes.union(lats), p);
        } else {
            draw_hist(f, sizes, " request size ", &map.size_hist, size_label);
            draw_hist(f, lats, " latency ", &map.lat_hist, lat_label);
        }
        let lines: Vec<Line> = if !cgroups_counted {
            vec![Line::from("not counted"), Line::from("(bio_probe = false)")]
        } else if map.cgroups.is_empty() {
            vec![Line::from("-")]
        } else {
            map.cgroups
                .iter()
                .map(|(c, p)| Line::from(format!("{p:>5.1}% {c}")))
                .collect()
        };
        f.render_widget(
            Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" cgroups ")),
            cg,
        );
    }
}

fn draw_sparklines(f: &mut Frame, area: Rect, paths: &[PathView]) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" MiB/s per path ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    if paths.is_empty() || inner.height == 0 {
        return;
    }
    let h = (inner.height / paths.len() as u16).max(1);
    let max = paths
        .iter()
        .flat_map(|p| p.history.iter().copied())
        .max()
        .unwrap_or(1)
        .max(1);
    for (i, p) in paths.iter().enumerate() {
        let y = inner.y + i as u16 * h;
        if y >= inner.y + inner.height {
            break;
        }
        let row = Rect::new(inner.x, y, inner.width, h.min(inner.y + inner.height - y));
        let [label, spark] =
            Layout::horizontal([Constraint::Length(13), Constraint::Min(1)]).areas(row);
        f.render_widget(
            Paragraph::new(format!("{:<5}{:>7}", p.device, num(p.mib_s))),
            label,
        );
        // Newest samples at the right edge.
        let n = spark.width as usize;
        let data: Vec<u64> = p.history.iter().rev().take(n).rev().copied().collect();
        f.render_widget(Sparkline::default().data(&data).max(max), spark);
    }
}

/// A path's latency per request size class: its speed is only comparable
/// with its peers' within a class (latency grows with size).
fn draw_by_size(f: &mut Frame, area: Rect, p: &PathView) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" {}: latency by request size ", p.device));
    if p.lat_by_size.is_empty() {
        f.render_widget(Paragraph::new("no completions").block(block), area);
        return;
    }
    let rows = p.lat_by_size.iter().map(|c| {
        Row::new(vec![
            Cell::from(c.class.clone()),
            Cell::from(c.samples.to_string()),
            Cell::from(opt_us(c.p50_us)),
            Cell::from(opt_us(c.p99_us)),
        ])
    });
    let widths = [
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(6),
    ];
    f.render_widget(
        Table::new(rows, widths)
            .header(
                Row::new(vec!["SIZE", "REQS", "P50", "P99"])
                    .style(Style::default().add_modifier(Modifier::BOLD)),
            )
            .block(block),
        area,
    );
}

fn size_label(b: u64) -> String {
    match b {
        b if b >= 1 << 20 => format!("{}M", b >> 20),
        b if b >= 1 << 10 => format!("{}K", b >> 10),
        b => format!("{b}"),
    }
}

fn lat_label(ns: u64) -> String {
    match ns {
        n if n >= 1_000_000 => format!("{}ms", n / 1_000_000),
        n if n >= 1_000 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn draw_hist(f: &mut Frame, area: Rect, title: &str, h: &[(u64, u64)], label: fn(u64) -> String) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title.to_string());
    let inner = block.inner(area);
    let total: u64 = h.iter().map(|(_, c)| c).sum();
    let bar_w = inner.width.saturating_sub(12) as u64;
    // The fullest buckets, in bucket order.
    let mut top: Vec<&(u64, u64)> = h.iter().filter(|(_, c)| *c > 0).collect();
    top.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    top.truncate(inner.height as usize);
    top.sort_by_key(|(b, _)| *b);
    let lines: Vec<Line> = if total == 0 {
        vec![Line::from("-")]
    } else {
        top.iter()
            .map(|(b, c)| {
                let pct = *c as f64 / total as f64 * 100.0;
                let bar = "#".repeat(((*c * bar_w) / total) as usize);
                Line::from(format!("{:>5} {:>3.0}% {bar}", label(*b), pct))
            })
            .collect()
    };
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_decisions(f: &mut Frame, area: Rect, m: &Model, ui: &Ui) {
    let block = pane_block(" tuner decisions ".into(), ui.pane == Pane::Decisions);
    let rows = area.height.saturating_sub(2) as usize;
    // Newest first; scrolling moves back in time.
    let lines: Vec<Line> = if m.decisions.is_empty() {
        vec![Line::from("no decisions yet")]
    } else {
        m.decisions
            .iter()
            .rev()
            .skip(ui.decision_scroll)
            .take(rows)
            .map(|d| {
                Line::from(vec![
                    Span::raw(format!("{} {} {} {} ", d.time, d.map, d.knob, d.change)),
                    Span::styled(
                        format!("[{}]", d.outcome),
                        match d.outcome.as_str() {
                            "kept" => Style::default().fg(Color::Green),
                            "reverted" => Style::default().fg(Color::Yellow),
                            _ => Style::default(),
                        },
                    ),
                    Span::raw(format!(" {}", d.reason)),
                ])
            })
            .collect()
    };
    f.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_footer(f: &mut Frame, area: Rect, ui: &Ui) {
    let s = match &ui.message {
        _ if ui.editing_filter => format!(" filter: {}_   (Enter keeps, Esc clears)", ui.filter),
        Some(m) => format!(" {m}"),
        None => {
            " q quit  ? help  Tab pane  arrows select  / filter  p pause  f/r fail/reinstate".into()
        }
    };
    f.render_widget(Paragraph::new(s), area);
}

fn popup(f: &mut Frame, area: Rect, title: &str, lines: Vec<Line>) {
    let w = (lines.iter().map(|l| l.width()).max().unwrap_or(10) as u16 + 4).min(area.width);
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" {title} ")),
        ),
        r,
    );
}
