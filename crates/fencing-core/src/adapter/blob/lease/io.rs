//! The bucket's record port: one lease record's read and conditional
//! write on a [`BlobBackend`].

use std::time::{Duration, SystemTime};

use super::record;
use crate::adapter::blob::frame::{self, Header};
use crate::adapter::blob::{BlobBackend, BlobVersion, BlobWrite, Precondition, WriteOutcome};
use crate::adapter::record::{LeaseRecord, On, RecordPort, Seen, Wrote};
use crate::{Error, Result};

/// Lease records as framed objects on a [`BlobBackend`]: the port of the
/// record lease ([`crate::adapter::record`]) that
/// [`BlobIssuer`](super::BlobIssuer) runs.
#[derive(Clone, Debug)]
pub struct BlobRecords<B> {
    pub(super) backend: B,
}

impl<B: BlobBackend> BlobRecords<B> {
    pub(super) fn foreign(&self, key: &str, why: &str) -> Error {
        Error::backend(
            self.backend.name(),
            false,
            format!("{key:?} is not a lease record of fencing ({why}); nothing was written"),
        )
    }
}

impl<B: BlobBackend> RecordPort for BlobRecords<B> {
    type Version = BlobVersion;

    fn name(&self) -> &'static str {
        self.backend.name()
    }

    /// Reads the record (a small object: all of it).
    async fn read(&self, key: &str) -> Result<Option<Seen<BlobVersion>>> {
        let Some(stored) = self.backend.read(key).await? else {
            return Ok(None);
        };
        let meta = match frame::decode_header(&stored.bytes) {
            Ok(Header::Framed(meta)) => meta,
            Ok(Header::Foreign) => return Err(self.foreign(key, "it has no fencing frame")),
            Err(damage) => return Err(self.foreign(key, &damage)),
        };
        let record = record::decode(meta.token.get(), &frame::value_of(&stored.bytes))
            .map_err(|why| self.foreign(key, &why))?;
        Ok(Some(Seen {
            version: stored.version,
            record,
            modified: stored.modified,
            answered: stored.answered,
        }))
    }

    async fn write(
        &self,
        key: &str,
        on: &On<BlobVersion>,
        record: &LeaseRecord,
    ) -> Result<Wrote<BlobVersion>> {
        let precondition = match on {
            On::Absent => Precondition::Absent,
            On::At(version) => Precondition::Matches(version.clone()),
        };
        let write = BlobWrite::new(record::encode(record), record::meta(record), precondition);
        Ok(match self.backend.write(key, write).await? {
            WriteOutcome::Written(version) => Wrote::Written(version),
            WriteOutcome::PreconditionFailed => Wrote::Refused,
        })
    }

    fn can_delete(&self) -> bool {
        self.backend.deletes_conditionally()
    }

    async fn delete(&self, key: &str, version: &BlobVersion) -> Result<bool> {
        self.backend.delete_if(key, version).await
    }

    fn server_now(&self) -> Option<SystemTime> {
        self.backend.server_now()
    }

    fn server_now_lag(&self) -> Duration {
        self.backend.server_now_lag()
    }
}
