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

/// What `verify` and the first [`TokenIssuer::remove_idle`](crate::TokenIssuer::remove_idle)
/// check of a backend that says it deletes conditionally, on an object
/// that exists: a delete conditioned on a version that cannot match must
/// be refused and leave the object in place. A server that ignores the
/// condition on a delete (some S3-compatible ones do, and AWS honours it
/// only since 2025) would let a removal judged on one version delete a
/// lease granted since.
pub(super) async fn conditional_delete_check<B: BlobBackend + ?Sized>(
    backend: &B,
    key: &str,
) -> Result<SafetyCheck> {
    const CHECK: &str = "refuses a delete under a stale version (If-Match on DELETE)";
    let name = backend.name();
    let refused = !backend
        .delete_if(key, &backend.unmatchable_version())
        .await?;
    let still_there = backend.read_prefix(key, 1).await?.is_some();
    Ok(if refused && still_there {
        SafetyCheck::pass(CHECK, format!("{name} answered: precondition failed"))
    } else {
        SafetyCheck::unsafe_(
            CHECK,
            format!(
                "{name} APPLIED a delete whose condition cannot hold (the object is {}): this server \
                 ignores conditions on deletes, so remove_idle could delete a lease granted after it \
                 judged the record idle; it is refused on this server",
                if still_there { "still there" } else { "gone" }
            ),
        )
    })
}
