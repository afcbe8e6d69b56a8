//! Refusals as the config tests check them: an [`Error::InvalidInput`]'s
//! message, or a table of URLs each refused mentioning its fragments.

use std::fmt;

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
