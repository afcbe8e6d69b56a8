//! The framed body: the token travels inside what the precondition compares.
//!
//! An object store's compare-and-swap compares a version that covers the
//! body (S3's ETag is its MD5; a GCS generation and an Azure ETag change on
//! every upload), but not always the metadata: a GCS metadata patch keeps the
//! generation, an S3 copy-in-place keeps the ETag. So the mark lives in the
//! body, and user metadata is at most a hint for people.
//!
//! ```text
//! offset  length  content
//! 0       8       FRAME_MAGIC, the ASCII bytes "fencing1"
//! 8       8       the token, u64 big-endian
//! 16      1       the state: b'v' (a value) or b'm' (a marker: fenced or deleted, no value)
//! 17      …       the value's bytes, as given (empty for a marker)
//! ```

use bytes::{BufMut, Bytes, BytesMut};

use super::BlobMeta;
use crate::FencingToken;

/// The first eight bytes of every object the blob store writes.
pub const FRAME_MAGIC: [u8; 8] = *b"fencing1";

/// The bytes the frame adds before the value: magic, token, state.
pub const FRAME_HEADER_LEN: usize = FRAME_MAGIC.len() + 8 + 1;

const STATE_VALUE: u8 = b'v';
const STATE_MARKER: u8 = b'm';

/// What the first bytes of an object say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    /// A fencing frame: the object's mark and state.
    Framed(BlobMeta),
    /// No frame: the object was written by a program that knows nothing of
    /// fencing.
    Foreign,
}

/// The object body for `value` written with `meta`.
pub fn encode(meta: BlobMeta, value: &[u8]) -> Bytes {
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

/// Reads the header from an object's first bytes (at least
/// [`FRAME_HEADER_LEN`] of them if the object is that long).
///
/// # Errors
/// A description of the damage when the magic is there but the rest is not
/// a frame: such an object is neither ours nor foreign, and guessing its
/// mark would be unsafe.
pub fn decode_header(prefix: &[u8]) -> Result<Header, String> {
    if prefix.len() < FRAME_MAGIC.len() || prefix[..FRAME_MAGIC.len()] != FRAME_MAGIC {
        return Ok(Header::Foreign);
    }
    if prefix.len() < FRAME_HEADER_LEN {
        return Err(format!(
            "{} bytes is shorter than the {FRAME_HEADER_LEN}-byte fencing header",
            prefix.len()
        ));
    }
    let mut token = [0u8; 8];
    token.copy_from_slice(&prefix[FRAME_MAGIC.len()..FRAME_MAGIC.len() + 8]);
    let has_value = match prefix[FRAME_HEADER_LEN - 1] {
        STATE_VALUE => true,
        STATE_MARKER => false,
        other => return Err(format!("unknown fencing state byte {other:#04x}")),
    };
    Ok(Header::Framed(BlobMeta {
        token: FencingToken::new(u64::from_be_bytes(token)),
        has_value,
    }))
}

/// A bounded read that ends within this many bytes of an object's start is
/// served with the frame in one request; further in, the frame is read
/// first and then the bytes, on the version the frame was read at (a read
/// of the frame alone is one more request, a read of the bytes before them
/// would be a large one).
pub const ONE_READ_LIMIT: u64 = 64 * 1024;

/// How many times a two-request read starts again when the object changed
/// between its two requests.
pub const READ_ATTEMPTS: u32 = 8;

/// An object's frame as a reader takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unframed {
    /// Its mark and state (mark 0 and a value, for a foreign object
    /// adopted).
    pub meta: BlobMeta,
    /// How many of its first bytes are the frame: [`FRAME_HEADER_LEN`], or
    /// 0 for a foreign object adopted.
    pub header_len: usize,
}

/// The frame at the start of `first`, the first bytes of the object at
/// `key` (at least [`FRAME_HEADER_LEN`] of them if it is that long), with
/// the policy for objects written without one: adopted at mark 0 as a
/// value with `adopt_unfenced`, else [`Error::Unfenced`](crate::Error::Unfenced).
///
/// # Errors
/// [`Error::Unfenced`](crate::Error::Unfenced); a
/// [`Backend`](crate::Error::Backend) error of `backend` naming the damage
/// when the magic is there but the rest is not a frame (guessing its mark
/// would be unsafe).
pub fn unframe(
    backend: &'static str,
    key: &str,
    first: &[u8],
    adopt_unfenced: bool,
) -> crate::Result<Unframed> {
    match decode_header(first) {
        Ok(Header::Framed(meta)) => Ok(Unframed {
            meta,
            header_len: FRAME_HEADER_LEN,
        }),
        Ok(Header::Foreign) if adopt_unfenced => Ok(Unframed {
            meta: BlobMeta {
                token: FencingToken::ZERO,
                has_value: true,
            },
            header_len: 0,
        }),
        Ok(Header::Foreign) => Err(crate::Error::Unfenced {
            key: key.to_owned(),
        }),
        Err(damage) => Err(crate::Error::backend(
            backend,
            false,
            format!("{key:?} starts with the fencing magic but is not a valid frame: {damage}"),
        )),
    }
}

/// How many of a listed object's `size` bytes are frame, where its size
/// says without a read: longer than a frame, [`FRAME_HEADER_LEN`] (a
/// value); shorter, 0 (written without fencing, shown as it is; a read
/// refuses it). `None`: its frame must be read (exactly a frame's length:
/// a tombstone or an empty value; and every object when foreign ones are
/// adopted).
pub fn frame_len_by_size(size: u64, adopt_unfenced: bool) -> Option<u64> {
    let header = FRAME_HEADER_LEN as u64;
    match size {
        _ if adopt_unfenced => None,
        size if size > header => Some(header),
        size if size < header => Some(0),
        _ => None,
    }
}

/// The value of a framed body (sharing `stored`'s allocation), or `None` for
/// a body that is not framed.
pub(crate) fn value_of(stored: &Bytes) -> Bytes {
    stored.slice(FRAME_HEADER_LEN.min(stored.len())..)
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
        assert_eq!(decode_header(&framed), Ok(Header::Framed(meta)));
        assert_eq!(value_of(&framed), Bytes::from_static(b"payload"));
        // The header alone (a ranged read) decodes the same.
        assert_eq!(
            decode_header(&framed[..FRAME_HEADER_LEN]),
            Ok(Header::Framed(meta))
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
        let framed = encode(marker, b"");
        assert_eq!(decode_header(&framed), Ok(Header::Framed(marker)));
        assert!(value_of(&framed).is_empty());
    }

    #[test]
    fn a_reader_adopts_foreign_objects_only_when_told() {
        let framed = encode(
            BlobMeta {
                token: FencingToken::new(7),
                has_value: false,
            },
            b"",
        );
        let read = unframe("test", "k", &framed, false).unwrap();
        assert_eq!(
            (read.meta.token.get(), read.header_len),
            (7, FRAME_HEADER_LEN)
        );
        assert!(matches!(
            unframe("test", "k", b"plain", false),
            Err(crate::Error::Unfenced { .. })
        ));
        let adopted = unframe("test", "k", b"plain", true).unwrap();
        assert_eq!(
            (adopted.meta.token, adopted.header_len),
            (FencingToken::ZERO, 0)
        );
        assert!(adopted.meta.has_value);
        let damaged = unframe("test", "k", b"fencing1\0\0", true).unwrap_err();
        assert!(damaged.chain().contains("not a valid frame"), "{damaged:?}");
    }

    #[test]
    fn a_listing_reads_a_frame_only_where_the_size_cannot_tell() {
        let header = FRAME_HEADER_LEN as u64;
        assert_eq!(frame_len_by_size(header + 1, false), Some(header));
        assert_eq!(frame_len_by_size(header - 1, false), Some(0));
        assert_eq!(frame_len_by_size(header, false), None);
        assert_eq!(frame_len_by_size(header + 1, true), None);
    }

    #[test]
    fn tells_foreign_from_damaged() {
        assert_eq!(decode_header(b""), Ok(Header::Foreign));
        assert_eq!(decode_header(b"short"), Ok(Header::Foreign));
        assert_eq!(
            decode_header(b"notframe\0\0\0\0\0\0\0\x01v"),
            Ok(Header::Foreign)
        );
        assert!(decode_header(b"fencing1\0\0\0\0\0\0\0\x01x").is_err());
        assert!(decode_header(b"fencing1\0\0").is_err());
    }
}
