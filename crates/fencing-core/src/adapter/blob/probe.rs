//! Whether a server honours conditional writes: the precondition checks
//! `verify` runs for [`BlobStore`](super::BlobStore) and
//! [`BlobIssuer`](super::BlobIssuer) alike.

use super::frame::{self, Header};
use super::{BlobBackend, BlobMeta, BlobWrite, Precondition, WriteOutcome};
use crate::safety::SafetyCheck;
use crate::{FencingToken, Result};

/// The precondition checks of `verify`, on an object that exists (the
/// store's probe key, the issuer's probe record): the same bytes written
/// back under a version that cannot match, then create-only. Both must be
/// refused; either way the object is unchanged.
pub(super) async fn precondition_checks<B: BlobBackend + ?Sized>(
    backend: &B,
    key: &str,
) -> Result<Vec<SafetyCheck>> {
    let Some(stored) = backend.read(key).await? else {
        return Ok(vec![SafetyCheck::unsafe_(
            "probe object readable",
            format!("{key:?} was written but reads as absent"),
        )]);
    };
    let hint = match frame::decode_header(&stored.bytes) {
        Ok(Header::Framed(meta)) => meta,
        _ => BlobMeta {
            token: FencingToken::ZERO,
            has_value: true,
        },
    };
    let name = backend.name();
    let mut checks = Vec::new();
    let cases = [
        (
            "refuses a write under a stale version (If-Match / ifGenerationMatch)",
            Precondition::Matches(backend.unmatchable_version()),
        ),
        (
            "refuses a create-only write over an existing object (If-None-Match / ifGenerationMatch=0)",
            Precondition::Absent,
        ),
    ];
    for (check, precondition) in cases {
        let write = BlobWrite::new(stored.bytes.clone(), hint, precondition.clone());
        let outcome = backend.write(key, write).await?;
        checks.push(match outcome {
            WriteOutcome::PreconditionFailed => {
                SafetyCheck::pass(check, format!("{name} answered: precondition failed"))
            }
            WriteOutcome::Written(_) => SafetyCheck::unsafe_(
                check,
                format!(
                    "{name} APPLIED a write whose precondition ({precondition:?}) cannot hold: \
                     this server ignores conditional-write headers, so racing writers can \
                     overwrite each other and a stale token can win. Do not fence on it."
                ),
            ),
        });
    }
    Ok(checks)
}
