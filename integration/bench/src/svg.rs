//! The ratios as a horizontal bar chart, written by hand (no plotting
//! dependency).

use std::fmt::Write;

use crate::measure::{RatioKind, Row};

const PLOT_WIDTH: f64 = 420.0;
const BAR_HEIGHT: f64 = 16.0;
const ROW_HEIGHT: f64 = 22.0;
const TOP: f64 = 56.0;

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A row's label: backend, operation, payload.
fn label(row: &Row) -> String {
    let payload = row.payload.map(crate::report::size).unwrap_or_default();
    if payload.is_empty() {
        format!("{} · {}", row.backend, row.operation)
    } else {
        format!("{} · {} · {payload}", row.backend, row.operation)
    }
}

/// One bar per row: the ratio, a line at 1.0, a tick at the row's target;
/// bars that miss their target are orange.
pub(crate) fn chart(rows: &[Row], title: &str) -> String {
    // About 6.6 px per character of 12 px sans-serif.
    let longest = rows
        .iter()
        .map(|r| label(r).chars().count())
        .max()
        .unwrap_or(0);
    let label_width = (longest as f64 * 6.6 + 24.0).max(200.0);
    let finite = rows.iter().map(|r| r.ratio).filter(|r| r.is_finite());
    let top = (finite.fold(2.0_f64, f64::max) * 1.1).ceil().max(2.0);
    let x = |ratio: f64| label_width + (ratio.clamp(0.0, top) / top) * PLOT_WIDTH;
    let height = TOP + ROW_HEIGHT * rows.len() as f64 + 40.0;
    let width = (label_width + PLOT_WIDTH + 70.0).max(760.0);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(
        s,
        r##"<rect width="100%" height="100%" fill="#ffffff"/>
<text x="10" y="20" font-size="15" font-weight="bold">{}</text>
<text x="10" y="38" fill="#555">Fenced ÷ plain median latency (blue; orange: above the target, the black tick); green: contention, plain ÷ fenced throughput.</text>"##,
        esc(title)
    );
    // Grid: every 0.5 up to `top`.
    let bottom = TOP + ROW_HEIGHT * rows.len() as f64;
    let mut g = 0.0;
    while g <= top + 1e-9 {
        let gx = x(g);
        let (stroke, w) = if (g - 1.0).abs() < 1e-9 {
            ("#333", 1.5)
        } else {
            ("#ddd", 1.0)
        };
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{:.1}" x2="{gx:.1}" y2="{bottom:.1}" stroke="{stroke}" stroke-width="{w}"/>
<text x="{gx:.1}" y="{:.1}" text-anchor="middle" fill="#555">{g:.1}×</text>"##,
            TOP - 4.0,
            bottom + 14.0
        );
        g += 0.5;
    }
    for (i, row) in rows.iter().enumerate() {
        let y = TOP + ROW_HEIGHT * i as f64;
        let label = label(row);
        let color = if row.misses_target() {
            "#d9822b"
        } else if row.kind == RatioKind::Throughput {
            "#7a9e5a"
        } else {
            "#4a7ebb"
        };
        let ratio = if row.ratio.is_finite() {
            row.ratio
        } else {
            0.0
        };
        // The value goes right of the bar and of the target tick.
        let text_x = x(ratio).max(row.target.map_or(0.0, x)) + 5.0;
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>
<rect x="{label_width:.1}" y="{:.1}" width="{:.1}" height="{BAR_HEIGHT}" fill="{color}"/>
<text x="{text_x:.1}" y="{:.1}">{ratio:.2}×</text>"##,
            label_width - 8.0,
            y + 12.5,
            esc(&label),
            y + 1.0,
            (x(ratio) - label_width).max(1.0),
            y + 12.5
        );
        if let Some(target) = row.target {
            let tx = x(target);
            let _ = writeln!(
                s,
                r##"<line x1="{tx:.1}" y1="{:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#000" stroke-width="2"/>"##,
                y - 1.0,
                y + BAR_HEIGHT + 3.0
            );
        }
    }
    s.push_str("</svg>\n");
    s
}
