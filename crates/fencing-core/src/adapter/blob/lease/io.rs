//! One lease record's read and conditional write, and how a write whose
//! answer was lost is settled by reading the record back.

use std::time::Instant;

use super::record::Record;
use super::{BlobIssuer, Current};
use crate::adapter::blob::frame::{self, Header};
use crate::adapter::blob::{BlobBackend, BlobWrite, Precondition, WriteOutcome};
use crate::{Error, Result};

/// How many times one write is sent while its answers are lost and the
/// record reads as it was before it.
const WRITE_ATTEMPTS: u32 = 3;

/// The outcome of one conditional write of a record.
pub(super) enum Wrote {
    Yes,
    /// Someone else wrote first.
    Lost,
}

impl<B: BlobBackend> BlobIssuer<B> {
    pub(super) fn foreign(&self, key: &str, why: &str) -> Error {
        Error::backend(
            self.backend.name(),
            false,
            format!("{key:?} is not a lease record of fencing ({why}); nothing was written"),
        )
    }

    /// Reads the record (a small object: all of it).
    pub(super) async fn read(&self, key: &str) -> Result<Option<Current>> {
        let Some(stored) = self.backend.read(key).await? else {
            return Ok(None);
        };
        let meta = match frame::decode_header(&stored.bytes) {
            Ok(Header::Framed(meta)) => meta,
            Ok(Header::Foreign) => return Err(self.foreign(key, "it has no fencing frame")),
            Err(damage) => return Err(self.foreign(key, &damage)),
        };
        let record = Record::decode(meta.token.get(), &frame::value_of(&stored.bytes))
            .map_err(|why| self.foreign(key, &why))?;
        let current = Current {
            version: stored.version,
            record,
            modified: stored.modified,
            answered: stored.answered,
            received: Instant::now(),
        };
        self.remember(key, Some(current.clone()));
        Ok(Some(current))
    }

    /// Writes `record` under `precondition`. A lost answer is resolved by
    /// reading the record back: our nonce there means it was applied; the
    /// record still as the precondition names it means it was not, and the
    /// same record is sent again on it (a first copy arriving late then
    /// fails its precondition, and a copy that won shows our nonce).
    pub(super) async fn write(
        &self,
        key: &str,
        precondition: Precondition,
        record: Record,
    ) -> Result<Wrote> {
        let mut unknown = None;
        for _ in 0..WRITE_ATTEMPTS {
            let write = BlobWrite::new(record.encode(), record.meta(), precondition.clone());
            match self.backend.write(key, write).await {
                Ok(WriteOutcome::Written(version)) => {
                    let current = Current {
                        version,
                        record,
                        modified: None,
                        answered: None,
                        received: Instant::now(),
                    };
                    self.remember(key, Some(current));
                    return Ok(Wrote::Yes);
                }
                Ok(WriteOutcome::PreconditionFailed) if unknown.is_none() => {
                    self.remember(key, None);
                    return Ok(Wrote::Lost);
                }
                // An earlier copy may have been applied: the read decides.
                Ok(WriteOutcome::PreconditionFailed) => {}
                Err(e @ Error::OutcomeUnknown { .. }) => unknown = Some(e),
                Err(e) => return Err(unknown.unwrap_or(e)),
            }
            self.remember(key, None);
            match self.read(key).await {
                Ok(Some(now)) if now.record.nonce == record.nonce => return Ok(Wrote::Yes),
                // Not applied: send it again on the same version.
                Ok(now) if precondition.holds_for(now.as_ref().map(|c| &c.version)) => {}
                // Not ours: it was not applied and another write came, or
                // ours was overwritten, which only a takeover after our
                // deadline does.
                Ok(_) => return Ok(Wrote::Lost),
                Err(_) => break,
            }
        }
        Err(unknown.expect("set by every try that did not return"))
    }
}
