//! S3's ETag of a single `PUT` (the MD5 of its body, quoted), for one
//! comparison only: a write whose condition was "lost" to a retry below
//! the layer is recognised as our own.

use md5::{Digest, Md5};

/// The quoted hex MD5 of the concatenated `chunks`.
pub(crate) fn etag_of<'a>(chunks: impl IntoIterator<Item = &'a [u8]>) -> String {
    use std::fmt::Write as _;
    let mut hasher = Md5::new();
    for chunk in chunks {
        hasher.update(chunk);
    }
    let mut out = String::from("\"");
    for b in hasher.finalize() {
        let _ = write!(out, "{b:02x}");
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::etag_of;

    #[test]
    fn the_etag_of_chunks_is_the_md5_of_their_concatenation() {
        let one = |s: &str| etag_of([s.as_bytes()]);
        assert_eq!(one(""), "\"d41d8cd98f00b204e9800998ecf8427e\"");
        assert_eq!(one("abc"), "\"900150983cd24fb0d6963f7d28e17f72\"");
        let text = "The quick brown fox jumps over the lazy dog";
        let (a, b) = text.as_bytes().split_at(20);
        assert_eq!(etag_of([a, b]), "\"9e107d9d372bb6826bd81d3542a419d6\"");
    }
}
