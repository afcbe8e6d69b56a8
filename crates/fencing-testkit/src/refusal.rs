//! Refusals as the config tests check them: an [`Error::InvalidInput`]'s
//! message, or a table of URLs each refused mentioning its fragments.

use std::fmt;

use fencing_core::adapter::descriptor::{Descriptor, OptionKind};
use fencing_core::{Error, Result};

/// The message of an [`Error::InvalidInput`]: what a config's tests check.
///
/// # Panics
/// For anything else, naming `what` (the URL tried).
pub fn invalid_input_message<T: fmt::Debug>(what: &str, result: Result<T>) -> String {
    match result {
        Err(Error::InvalidInput { message }) => message,
        other => panic!("{what}: expected InvalidInput, got {other:?}"),
    }
}

/// Asserts that `parse` refuses each URL with an [`Error::InvalidInput`]
/// whose message mentions every fragment listed for it: a config's
/// refusals, as a table.
///
/// # Panics
/// On the first URL accepted or refused otherwise, or whose message lacks
/// a fragment.
pub fn assert_refused<T: fmt::Debug>(parse: impl Fn(&str) -> Result<T>, cases: &[(&str, &[&str])]) {
    for (url, fragments) in cases {
        let message = invalid_input_message(url, parse(url));
        for fragment in *fragments {
            assert!(
                message.contains(fragment),
                "{url}: {message:?} does not mention {fragment:?}"
            );
        }
    }
}

/// A value of `kind` that its option accepts, for a URL.
pub fn sample(kind: OptionKind) -> &'static str {
    match kind {
        OptionKind::Bool => "true",
        OptionKind::Duration => "1s",
        OptionKind::Count => "3",
        OptionKind::Text => "t_",
        OptionKind::Path => "/tmp/x.pem",
        OptionKind::Choice(words) => words[0],
        OptionKind::TlsMode(modes) => modes.last().map_or("", |m| m.as_str()),
        _ => "x",
    }
}

/// Asserts that `from_url` reads every option `backend` declares: for each
/// scheme and each option it takes, `base(scheme)?name=SAMPLE` is accepted,
/// or refused for another reason (a contradiction, a certificate without
/// its key), never as unknown or as declared but not read.
///
/// # Panics
/// Naming the URL and the refusal.
pub fn every_option_is_read<T: fmt::Debug>(
    backend: &Descriptor,
    base: impl Fn(&str) -> String,
    from_url: impl Fn(&str) -> Result<T>,
) {
    for scheme in backend.schemes {
        for option in backend.options_of(scheme) {
            let url = format!("{}?{}={}", base(scheme), option.name, sample(option.kind));
            if let Err(e) = from_url(&url) {
                let e = e.to_string();
                assert!(
                    !e.contains("was not read") && !e.contains("unknown option"),
                    "{url}: {e}"
                );
            }
        }
    }
}
