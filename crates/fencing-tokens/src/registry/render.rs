//! What the registry renders from each descriptor: `fence --help`'s URL
//! grammar and the rows of the backend tables in the docs. A descriptor
//! states the facts; how they read is the facade's.

use fencing_core::adapter::descriptor::{Descriptor, UrlOption};

/// A backend's URL grammar: the shape, then every option (`key=KIND`), wrapped
/// to lines of about `width` characters, continuation lines indented
/// by four spaces.
pub(crate) fn grammar(backend: &Descriptor, width: usize) -> String {
    let options = backend.options();
    // Options of every scheme first, then each scheme group's own.
    let mut groups: Vec<(&[&str], Vec<&UrlOption>)> = Vec::new();
    for option in &options {
        let key = if option.schemes.len() < backend.schemes.len() {
            option.schemes
        } else {
            &[]
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, members)) => members.push(option),
            None => groups.push((key, vec![option])),
        }
    }
    groups.sort_by_key(|(k, _)| !k.is_empty());
    let mut out = backend.shape.to_owned();
    for (schemes, members) in groups {
        let lead = if schemes.is_empty() {
            "  ?".to_owned()
        } else {
            format!("\n    {}:// only: ", schemes.join("|"))
        };
        let mut line_len = out.rsplit('\n').next().map_or(0, str::len);
        for (i, option) in members.iter().enumerate() {
            let sep = match i {
                0 if schemes.is_empty() && line_len + 3 + word_len(option) > width => "\n      ?",
                0 => lead.as_str(),
                _ => "&",
            };
            let word = format!("{}={}", option.name, option.kind.placeholder());
            if i > 0 && line_len + sep.len() + word.len() > width {
                out.push_str("&\n      ");
                line_len = 6;
            } else {
                out.push_str(sep);
                line_len = out.rsplit('\n').next().map_or(0, str::len);
            }
            line_len += word.len();
            out.push_str(&word);
        }
    }
    out
}

/// A backend's row of the backend table.
pub(crate) fn markdown_row(backend: &Descriptor) -> String {
    let schemes: Vec<String> = backend
        .schemes
        .iter()
        .map(|s| format!("`{s}://`"))
        .collect();
    let features: Vec<String> = backend.features.iter().map(|f| format!("`{f}`")).collect();
    let options: Vec<String> = backend
        .options()
        .iter()
        .map(|o| {
            let mut cell = format!("`{}={}`", o.name, o.kind.placeholder());
            if let Some(default) = o.default {
                cell.push_str(&format!(" (default `{default}`)"));
            }
            if !o.schemes.is_empty() && o.schemes.len() < backend.schemes.len() {
                cell.push_str(&format!(" [{}]", o.schemes.join(", ")));
            }
            cell.push_str(": ");
            cell.push_str(o.doc);
            if o.secret {
                cell.push_str(" (secret: never shown)");
            }
            cell.replace('|', "\\|")
        })
        .collect();
    format!(
        "| [`{}`](../crates/{}) | {} | {} | {} | `{}` | {} |",
        backend.crate_name,
        backend.crate_name,
        features.join(", "),
        schemes.join(", "),
        backend.roles(),
        backend.shape.replace('|', "\\|"),
        options.join("<br>"),
    )
}

/// The length of `key=PLACEHOLDER`.
fn word_len(option: &UrlOption) -> usize {
    option.name.len() + 1 + option.kind.placeholder().len()
}

/// The README backend table's header: [`markdown_row`] fills it.
pub(crate) const MARKDOWN_HEADER: &str = "\
| crate | feature | schemes | opens | URL | options |
| --- | --- | --- | --- | --- | --- |";

#[cfg(test)]
mod tests {
    use fencing_core::adapter::descriptor::OptionKind;
    use fencing_core::tls::TlsMode;

    use super::*;

    const D: Descriptor = Descriptor {
        name: "x",
        title: "X",
        crate_name: "fencing-x",
        features: &["x"],
        schemes: &["x", "xs"],
        shape: "x://HOST",
        options: &[
            UrlOption::new("on", OptionKind::Bool, "a switch"),
            UrlOption::new("n", OptionKind::Count, "a number").only(&["xs"]),
            UrlOption::new("pw", OptionKind::Choice(&["a", "b"]), "a secret").secret(),
        ],
        tls_modes: &[TlsMode::Disable, TlsMode::VerifyFull],
        check: |_| Ok(()),
        open_issuer: None,
        open_store: None,
    };

    #[test]
    fn grammar_and_table_name_every_option() {
        let grammar = grammar(&D, 40);
        let row = markdown_row(&D);
        for option in D.options() {
            assert!(grammar.contains(option.name), "{grammar}");
            assert!(row.contains(&format!("`{}=", option.name)), "{row}");
        }
        assert!(grammar.contains("\n    "), "wrapped: {grammar}");
        assert!(grammar.contains("xs:// only: n=N"), "{grammar}");
        assert!(row.contains("(secret: never shown)"), "{row}");
        for backend in crate::registry::BACKENDS {
            let grammar = super::grammar(backend, 96);
            for option in backend.options() {
                assert!(grammar.contains(option.name), "{grammar}");
            }
        }
    }
}
