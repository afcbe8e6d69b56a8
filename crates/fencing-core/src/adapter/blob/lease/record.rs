//! The lease record's layout in a bucket: the frame (its token is the
//! counter), then `fencing-lease 1`, `ttl_ms=`, `nonce=` and `holder=`
//! lines.

use bytes::Bytes;

use super::super::BlobMeta;
use super::super::frame;
use crate::FencingToken;
use crate::adapter::record::LeaseRecord;

/// The first line of a record's value: what it is, and its layout's version.
const RECORD_TAG: &str = "fencing-lease 1";

/// What the frame says: the counter, and a value.
pub(super) fn meta(record: &LeaseRecord) -> BlobMeta {
    BlobMeta {
        token: FencingToken::new(record.counter),
        has_value: true,
    }
}

/// The framed body.
pub(super) fn encode(record: &LeaseRecord) -> Bytes {
    let value = format!(
        "{RECORD_TAG}\nttl_ms={}\nnonce={:032x}\nholder={}",
        record.ttl_ms,
        record.nonce,
        record.holder.as_deref().unwrap_or("")
    );
    frame::encode(meta(record), value.as_bytes())
}

/// The record a framed value at `counter` holds, or why it is none.
pub(super) fn decode(counter: u64, value: &[u8]) -> std::result::Result<LeaseRecord, String> {
    let text = std::str::from_utf8(value).map_err(|_| "its value is not UTF-8".to_owned())?;
    let rest = text
        .strip_prefix(RECORD_TAG)
        .and_then(|r| r.strip_prefix('\n'))
        .ok_or_else(|| format!("its value does not start with {RECORD_TAG:?}"))?;
    let mut lines = rest.splitn(3, '\n');
    let mut field = |name: &str| {
        lines
            .next()
            .and_then(|l| l.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("it has no {name}= line"))
    };
    let ttl_ms = field("ttl_ms")?;
    let ttl_ms = ttl_ms
        .parse()
        .map_err(|_| format!("its ttl_ms {ttl_ms:?} is not a number"))?;
    let nonce = field("nonce")?;
    let nonce =
        u128::from_str_radix(nonce, 16).map_err(|_| format!("its nonce {nonce:?} is not hex"))?;
    let holder = field("holder")?;
    Ok(LeaseRecord {
        counter,
        holder: (!holder.is_empty()).then(|| holder.to_owned()),
        ttl_ms,
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::blob::frame::Header;

    #[test]
    fn a_record_reads_back_as_written() {
        for holder in [None, Some("host:1:ab\ncd=ef".to_owned())] {
            let record = LeaseRecord {
                counter: 41,
                holder,
                ttl_ms: 1500,
                nonce: 7,
            };
            let body = encode(&record);
            let Ok(Header::Framed(meta)) = frame::decode_header(&body) else {
                panic!("not framed");
            };
            assert_eq!(meta.token, FencingToken::new(41));
            let back = decode(41, &frame::value_of(&body)).expect("decodes");
            assert_eq!(back, record);
        }
    }

    #[test]
    fn a_value_that_is_no_record_is_refused() {
        for value in [
            &b"hello"[..],
            b"fencing-lease 1\nttl_ms=x\nnonce=1\nholder=",
            b"\xff",
        ] {
            assert!(decode(1, value).is_err(), "{value:?} decoded");
        }
    }
}
