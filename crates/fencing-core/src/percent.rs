//! Percent-decoding, a leaf both the URL parser ([`crate::adapter::url`])
//! and the redaction ([`crate::redact`]) use: kept apart from either so
//! that neither imports the other for it.

use crate::{Error, Result};

/// Decodes `%XX` escapes; `+` is left as it is (base64 in a SAS uses it).
pub(crate) fn percent_decode(s: &str) -> Result<String> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let bad = || Error::invalid_input(format!("bad percent-encoding in URL option {s:?}"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::percent_decode;

    #[test]
    fn escapes_are_decoded_plus_is_kept_and_bad_ones_refused() {
        assert_eq!(percent_decode("a%2Fb+c").unwrap(), "a/b+c");
        assert_eq!(percent_decode("plain").unwrap(), "plain");
        for bad in ["%4", "%zz", "%ff"] {
            assert!(percent_decode(bad).is_err(), "{bad}");
        }
    }
}
