//! One PNG bar chart per scenario, drawn with plotters' bitmap backend and
//! no font dependency: labels use a built-in 5x7 pixel font.
use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

/// One bar: a label under it, its value, and whether it is pathpilot's.
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub ours: bool,
}

/// A group of bars (one case of a scenario) with an optional reference
/// line (the sum of the caps).
pub struct Group {
    pub title: String,
    pub bars: Vec<Bar>,
    pub limit: Option<f64>,
}

const W: u32 = 1200;
const GROUP_H: u32 = 260;
const SCALE: i32 = 2;

/// 5x7 glyphs, one byte per row, bit 4 = leftmost pixel.
fn glyph(c: char) -> [u8; 7] {
    match c.to_ascii_uppercase() {
        '0' => [14, 17, 19, 21, 25, 17, 14],
        '1' => [4, 12, 4, 4, 4, 4, 14],
        '2' => [14, 17, 1, 2, 4, 8, 31],
        '3' => [31, 2, 4, 2, 1, 17, 14],
        '4' => [2, 6, 10, 18, 31, 2, 2],
        '5' => [31, 16, 30, 1, 1, 17, 14],
        '6' => [6, 8, 16, 30, 17, 17, 14],
        '7' => [31, 1, 2, 4, 8, 8, 8],
        '8' => [14, 17, 17, 14, 17, 17, 14],
        '9' => [14, 17, 17, 15, 1, 2, 12],
        'A' => [14, 17, 17, 31, 17, 17, 17],
        'B' => [30, 17, 17, 30, 17, 17, 30],
        'C' => [14, 17, 16, 16, 16, 17, 14],
        'D' => [28, 18, 17, 17, 17, 18, 28],
        'E' => [31, 16, 16, 30, 16, 16, 31],
        'F' => [31, 16, 16, 30, 16, 16, 16],
        'G' => [14, 17, 16, 23, 17, 17, 15],
        'H' => [17, 17, 17, 31, 17, 17, 17],
        'I' => [14, 4, 4, 4, 4, 4, 14],
        'J' => [7, 2, 2, 2, 2, 18, 12],
        'K' => [17, 18, 20, 24, 20, 18, 17],
        'L' => [16, 16, 16, 16, 16, 16, 31],
        'M' => [17, 27, 21, 21, 17, 17, 17],
        'N' => [17, 17, 25, 21, 19, 17, 17],
        'O' => [14, 17, 17, 17, 17, 17, 14],
        'P' => [30, 17, 17, 30, 16, 16, 16],
        'Q' => [14, 17, 17, 17, 21, 18, 13],
        'R' => [30, 17, 17, 30, 20, 18, 17],
        'S' => [15, 16, 16, 14, 1, 1, 30],
        'T' => [31, 4, 4, 4, 4, 4, 4],
        'U' => [17, 17, 17, 17, 17, 17, 14],
        'V' => [17, 17, 17, 17, 17, 10, 4],
        'W' => [17, 17, 17, 21, 21, 21, 10],
        'X' => [17, 17, 10, 4, 10, 17, 17],
        'Y' => [17, 17, 17, 10, 4, 4, 4],
        'Z' => [31, 1, 2, 4, 8, 16, 31],
        '.' => [0, 0, 0, 0, 0, 12, 12],
        '-' => [0, 0, 0, 31, 0, 0, 0],
        '/' => [0, 1, 2, 4, 8, 16, 0],
        ':' => [0, 12, 12, 0, 12, 12, 0],
        '%' => [24, 25, 2, 4, 8, 19, 3],
        '=' => [0, 0, 31, 0, 31, 0, 0],
        '(' => [2, 4, 8, 8, 8, 4, 2],
        ')' => [8, 4, 2, 2, 2, 4, 8],
        '+' => [0, 4, 4, 31, 4, 4, 0],
        ',' => [0, 0, 0, 0, 12, 4, 8],
        _ => [0; 7],
    }
}

fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    s: &str,
    x: i32,
    y: i32,
    scale: i32,
    color: &RGBColor,
) -> Result<()> {
    for (i, c) in s.chars().enumerate() {
        let g = glyph(c);
        let x0 = x + i as i32 * 6 * scale;
        for (row, bits) in g.iter().enumerate() {
            for col in 0..5 {
                if bits & (16 >> col) != 0 {
                    let px = x0 + col * scale;
                    let py = y + row as i32 * scale;
                    if scale == 1 {
                        area.draw_pixel((px, py), color)
                    } else {
                        area.draw(&Rectangle::new(
                            [(px, py), (px + scale, py + scale)],
                            color.filled(),
                        ))
                    }
                    .map_err(|e| anyhow!("chart: {e}"))?;
                }
            }
        }
    }
    Ok(())
}

/// Draws every group as a row of bars (MiB/s) and writes `path`.
pub fn draw(path: &Path, title: &str, unit: &str, groups: &[Group]) -> Result<()> {
    let h = 40 + GROUP_H * groups.len().max(1) as u32;
    let root = BitMapBackend::new(path, (W, h)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("chart: {e}"))?;
    text(&root, title, 10, 10, 3, &BLACK)?;
    let grey = RGBColor(170, 170, 170);
    let ours = RGBColor(220, 80, 30);
    let theirs = RGBColor(60, 110, 180);
    for (gi, g) in groups.iter().enumerate() {
        let top = 40 + gi as i32 * GROUP_H as i32;
        text(&root, &g.title, 10, top + 6, SCALE, &BLACK)?;
        let plot_top = top + 30;
        let plot_h = GROUP_H as i32 - 30 - 50;
        let base = plot_top + plot_h;
        let max = g
            .bars
            .iter()
            .map(|b| b.value)
            .chain(g.limit)
            .filter(|v| v.is_finite())
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.1;
        let y_of = |v: f64| base - ((v / max) * plot_h as f64).round() as i32;
        root.draw(&PathElement::new(
            vec![(60, base), (W as i32 - 10, base)],
            BLACK.stroke_width(1),
        ))
        .map_err(|e| anyhow!("chart: {e}"))?;
        if let Some(l) = g.limit {
            let y = y_of(l);
            root.draw(&PathElement::new(
                vec![(60, y), (W as i32 - 10, y)],
                grey.stroke_width(2),
            ))
            .map_err(|e| anyhow!("chart: {e}"))?;
            text(&root, &format!("SUM OF CAPS {l:.0}"), 4, y - 16, 1, &grey)?;
        }
        let n = g.bars.len().max(1) as i32;
        let slot = (W as i32 - 80) / n;
        for (i, b) in g.bars.iter().enumerate() {
            let x0 = 70 + i as i32 * slot;
            let x1 = x0 + slot * 2 / 3;
            let v = if b.value.is_finite() { b.value } else { 0.0 };
            let y = y_of(v);
            let color = if b.ours { ours } else { theirs };
            root.draw(&Rectangle::new([(x0, y), (x1, base)], color.filled()))
                .map_err(|e| anyhow!("chart: {e}"))?;
            let val = format!("{v:.1}");
            text(&root, &val, x0, (y - 16).max(plot_top - 14), SCALE, &BLACK)?;
            // Labels wrap to the slot width on two lines.
            let chars = ((slot - 4) / 12).max(4) as usize;
            let label: Vec<char> = b.label.chars().collect();
            for (li, chunk) in label.chunks(chars).take(3).enumerate() {
                let s: String = chunk.iter().collect();
                text(&root, &s, x0, base + 6 + li as i32 * 16, SCALE, &BLACK)?;
            }
        }
        text(&root, unit, 4, base - 10, 1, &BLACK)?;
    }
    root.present().map_err(|e| anyhow!("chart: {e}"))?;
    Ok(())
}
