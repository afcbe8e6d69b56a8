//! Error text for failure messages.

/// `e` and its causes, `outer: cause: root cause`. The SDKs keep the useful
/// part (a refused connection, `NoSuchBucket`) in `source()`, which
/// `Display` alone would hide.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}
