//! Draws a real run of Figure 9-6 as an SVG timeline.

use std::fmt::Write;
use std::time::Duration;

use fencing_tokens::scenario::{Event, Step};

const WIDTH: f64 = 900.0;
const LEFT: f64 = 110.0;
const RIGHT: f64 = 30.0;
const ROW: [f64; 3] = [70.0, 150.0, 230.0];

/// The timeline of one run: a row per client and one for the store. Time
/// runs left to right to scale up to the zombie's wake-up; the steps right
/// after it happen within milliseconds, so they are spread out to be read.
pub(crate) fn timeline(events: &[Event], ttl: Duration) -> String {
    let woke = events
        .iter()
        .find(|e| matches!(e.step, Step::Resumed { .. }))
        .map_or(ttl.as_secs_f64() * 1.5, |e| e.at.as_secs_f64())
        .max(1e-3);
    let scale = (WIDTH * 0.45 - LEFT) / woke;
    let mut xs = Vec::with_capacity(events.len());
    for event in events {
        let real = LEFT + scale * event.at.as_secs_f64();
        // Never earlier than the step before; steps after the first lease
        // at least 80 px apart.
        let spread = match (xs.last(), &event.step) {
            (None, _) => real,
            (Some(&prev), Step::Paused { .. } | Step::Final { .. }) => real.max(prev),
            (Some(&prev), _) => real.max(prev + 80.0),
        };
        xs.push(spread);
    }
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="330" font-family="sans-serif" font-size="13">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="24" font-size="15" font-weight="bold">Figure 9-6, a real run: the store refuses the paused client's write</text>
<defs><pattern id="pause" width="8" height="8" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="4" height="8" fill="#f4b6b6"/></pattern></defs>
"##
    );
    for (row, label) in ROW.iter().zip(["client 1", "client 2", "storage"]) {
        let _ = writeln!(
            svg,
            r##"<text x="10" y="{}" font-weight="bold">{label}</text>"##,
            row + 5.0
        );
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{row}" x2="{}" y2="{row}" stroke="#bbb"/>"##,
            WIDTH - RIGHT
        );
    }
    let mut pause_start = None;
    let mut writes = 0.0;
    for (event, &at) in events.iter().zip(&xs) {
        match &event.step {
            Step::Acquired { client, token, ttl } => {
                let row = ROW[usize::from(*client) - 1];
                let until = (at + scale * ttl.as_secs_f64()).min(WIDTH - RIGHT);
                let _ = writeln!(
                    svg,
                    r##"<rect x="{at:.1}" y="{:.1}" width="{:.1}" height="14" fill="#9ecbf0" stroke="#3b7dbf"/><text x="{:.1}" y="{:.1}">lease, token {token} (TTL {ttl:?})</text>"##,
                    row - 22.0,
                    until - at,
                    at + 4.0,
                    row - 11.0
                );
            }
            Step::Paused { .. } => pause_start = Some(at),
            Step::Resumed { client } => {
                if let Some(start) = pause_start.take() {
                    let row = ROW[usize::from(*client) - 1];
                    let _ = writeln!(
                        svg,
                        r##"<rect x="{start:.1}" y="{:.1}" width="{:.1}" height="14" fill="url(#pause)"/><text x="{:.1}" y="{:.1}" fill="#a33">paused (GC, VM freeze): the lease expires, client 1 does not know</text>"##,
                        row + 4.0,
                        at - start,
                        start + 4.0,
                        row + 32.0
                    );
                }
            }
            Step::Fenced { client, token } => {
                let label = format!("fence at {token}");
                arrow(&mut svg, at, *client, &label, "#3b7dbf", &mut writes);
            }
            Step::Wrote { client, token, .. } => {
                let label = format!("write, token {token}: accepted");
                arrow(&mut svg, at, *client, &label, "#2a8a2a", &mut writes);
            }
            Step::Refused {
                client,
                presented,
                current,
                ..
            } => {
                let label = format!("write, token {presented}: REFUSED ({current} seen)");
                arrow(&mut svg, at, *client, &label, "#c22", &mut writes);
            }
            Step::Final { value, token } => {
                let _ = writeln!(
                    svg,
                    r##"<text x="{LEFT}" y="318">The store holds {value:?} at token {token}; the lease alone could not have stopped client 1.</text>"##
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// A write (or fence) travelling from a client's row down to the store,
/// labelled below the store's row on the next of the `lines` (one per
/// write, so labels never overlap).
fn arrow(svg: &mut String, x: f64, client: u8, label: &str, color: &str, lines: &mut f64) {
    let line = *lines;
    *lines += 1.0;
    let from = ROW[usize::from(client) - 1] + 2.0;
    let to = ROW[2] - 4.0;
    let label_y = ROW[2] + 22.0 + 17.0 * line;
    let _ = writeln!(
        svg,
        r##"<line x1="{x:.1}" y1="{from}" x2="{x:.1}" y2="{to}" stroke="{color}" stroke-width="2"/><polygon points="{x:.1},{to} {:.1},{:.1} {:.1},{:.1}" fill="{color}"/><line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{:.1}" stroke="{color}" stroke-dasharray="2,3"/><text x="{:.1}" y="{label_y:.1}" fill="{color}">{label}</text>"##,
        x - 5.0,
        to - 8.0,
        x + 5.0,
        to - 8.0,
        ROW[2] + 2.0,
        label_y - 4.0,
        x + 4.0,
    );
}
