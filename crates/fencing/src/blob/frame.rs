//! The framed body: what makes S3's ETag cover the token.
//!
//! ```text
//! offset  length  content
//! 0       8       FRAME_MAGIC, the ASCII bytes "fencing1"
//! 8       8       the token, u64 big-endian
//! 16      1       the state: b'v' (a value) or b'm' (a marker: fenced or deleted, no value)
//! 17      …       the value's bytes, as given (empty for a marker)
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use fencing::FencingToken;
use fencing::blob::BlobMeta;

/// The first eight bytes of every object this crate writes.
pub const FRAME_MAGIC: [u8; 8] = *b"fencing1";

/// The bytes the frame adds before the value: magic, token, state.
pub const FRAME_HEADER_LEN: usize = FRAME_MAGIC.len() + 8 + 1;

const STATE_VALUE: u8 = b'v';
const STATE_MARKER: u8 = b'm';

/// The object body for `value` written with `meta`.
pub(crate) fn encode(meta: BlobMeta, value: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(FRAME_HEADER_LEN + value.len());
    out.put_slice(&FRAME_MAGIC);
    out.put_u64(meta.token.get());
    out.put_u8(if meta.has_value {
        STATE_VALUE
    } else {
        STATE_MARKER
    });
    out.put_slice(value);
    out.freeze()
}

/// The metadata and value of a framed body (the value shares `stored`'s
/// allocation).
pub(crate) fn decode(stored: &Bytes) -> Result<(BlobMeta, Bytes), String> {
    if stored.len() < FRAME_HEADER_LEN {
        return Err(format!(
            "{} bytes is shorter than the {FRAME_HEADER_LEN}-byte header",
            stored.len()
        ));
    }
    if stored[..FRAME_MAGIC.len()] != FRAME_MAGIC {
        return Err("the magic bytes are missing".to_owned());
    }
    let mut token = [0u8; 8];
    token.copy_from_slice(&stored[FRAME_MAGIC.len()..FRAME_MAGIC.len() + 8]);
    let has_value = match stored[FRAME_HEADER_LEN - 1] {
        STATE_VALUE => true,
        STATE_MARKER => false,
        other => return Err(format!("unknown state byte {other:#04x}")),
    };
    let meta = BlobMeta {
        token: FencingToken::new(u64::from_be_bytes(token)),
        has_value,
    };
    Ok((meta, stored.slice(FRAME_HEADER_LEN..)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_covers_the_token() {
        let meta = BlobMeta {
            token: FencingToken::new(0x0102_0304_0506_0708),
            has_value: true,
        };
        let framed = encode(meta, b"payload");
        assert_eq!(&framed[..8], b"fencing1");
        assert_eq!(&framed[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(framed[16], b'v');
        assert_eq!(
            decode(&framed).unwrap(),
            (meta, Bytes::from_static(b"payload"))
        );

        // Same bytes, another token: another body, so another MD5 ETag.
        let fenced = encode(
            BlobMeta {
                token: FencingToken::new(9),
                ..meta
            },
            b"payload",
        );
        assert_ne!(framed, fenced);

        let marker = BlobMeta {
            token: FencingToken::new(u64::MAX),
            has_value: false,
        };
        assert_eq!(
            decode(&encode(marker, b"")).unwrap(),
            (marker, Bytes::new())
        );
    }

    #[test]
    fn refuses_what_is_not_a_frame() {
        assert!(decode(&Bytes::from_static(b"short")).is_err());
        assert!(decode(&Bytes::from_static(b"notframe\0\0\0\0\0\0\0\x01v")).is_err());
        assert!(decode(&Bytes::from_static(b"fencing1\0\0\0\0\0\0\0\x01x")).is_err());
    }
}
