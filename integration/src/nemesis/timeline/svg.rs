//! A run as a picture, for a failing seed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::{Event, Timeline};

impl Timeline {
    /// The run as a picture: one lane per client (grey while it believed it
    /// held the lease; green accepted, red refused, orange failed calls),
    /// faults as shaded bands with their detail on hover.
    pub fn svg(&self, title: &str) -> String {
        let clients = self.events.iter().map(|e| e.0 + 1).max().unwrap_or(0);
        // The report is long: one line per clause of it.
        let heading: Vec<&str> = title.split("; ").collect();
        let (width, lane) = (1400.0, 26.0);
        let top = 20.0 + 16.0 * heading.len() as f64;
        let span = (self.span.1 - self.span.0).max(1) as f64;
        let x = |ns: u64| 120.0 + (ns.saturating_sub(self.span.0)) as f64 / span * (width - 140.0);
        let height = top + lane * clients as f64 + 30.0;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">\n"
        );
        for (i, line) in heading.iter().enumerate() {
            let y = 18.0 + 16.0 * i as f64;
            let _ = writeln!(s, "<text x=\"10\" y=\"{y}\">{}</text>", escape(line));
        }
        for f in &self.faults {
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{top}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f4a\" fill-opacity=\"0.15\"><title>{}: {}</title></rect>",
                x(f.start),
                (x(f.end) - x(f.start)).max(1.0),
                lane * clients as f64,
                escape(&f.kind),
                escape(&f.detail)
            );
        }
        let y = |c: usize| top + lane * c as f64;
        for c in 0..clients {
            let _ = writeln!(
                s,
                "<text x=\"10\" y=\"{:.1}\">client {}</text>",
                y(c) + 17.0,
                c + 1
            );
        }
        let mut held: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
        let bar = |s: &mut String, c: usize, (start, token): (u64, u64), end: u64| {
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"10\" fill=\"#bbb\"><title>token {token}</title></rect>",
                x(start),
                y(c) + 4.0,
                (x(end) - x(start)).max(1.0)
            );
        };
        for (c, at, e) in &self.events {
            match e {
                Event::Grant(_, t) => {
                    if let Some(h) = held.insert(*c, (*at, *t)) {
                        bar(&mut s, *c, h, *at);
                    }
                }
                Event::Release(..) => {
                    if let Some(h) = held.remove(c) {
                        bar(&mut s, *c, h, *at);
                    }
                }
                _ => {}
            }
        }
        for (c, h) in held {
            bar(&mut s, c, h, self.span.1);
        }
        for call in self.calls() {
            let (color, what) = match &call.outcome {
                Some(Event::Ok) => ("#2a2", "accepted".to_owned()),
                Some(Event::Stale(m)) => ("#d22", format!("refused, mark {m}")),
                Some(Event::Err(e)) => ("#e80", format!("failed: {e}")),
                _ => ("#e80", "no answer".to_owned()),
            };
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"2\" height=\"8\" fill=\"{color}\"><title>token {} {}</title></rect>",
                x(call.start),
                y(call.client) + 16.0,
                call.token,
                escape(&what)
            );
        }
        s.push_str("</svg>\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
