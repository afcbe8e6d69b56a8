//! What an HTTP object store's answer means to the compare-and-swap loop:
//! one status table for S3, GCS and Azure, with per-backend overrides.
//!
//! Each adapter keeps its own `classify` for what only its SDK knows (a
//! request that could not be built, a timeout, a dropped connection), and
//! hands every answer that carries an HTTP status to [`failure`], naming
//! the [`Request`] and its [`Override`]s. The default table:
//!
//! | status | `Head` / `Read` | `Create` | `Update` |
//! | --- | --- | --- | --- |
//! | 404 | [`Absent`](Meaning::Absent) | [`Permanent`](Meaning::Permanent) (no bucket) | [`LostRace`](Meaning::LostRace) (gone meanwhile) |
//! | 412 | `Permanent` | `LostRace` | `LostRace` |
//! | 416 | `Head`: [`EmptyRange`](Meaning::EmptyRange); `Read`: `Permanent` | `Permanent` | `Permanent` |
//! | 429 | [`Retryable`](Meaning::Retryable) | `Retryable` | `Retryable` |
//! | 408, 5xx | `Retryable` | [`OutcomeUnknown`](Meaning::OutcomeUnknown) | `OutcomeUnknown` |
//! | anything else | `Permanent` | `Permanent` | `Permanent` |
//!
//! A 5xx (or a 408) after a write was sent may mean it was applied, so it is
//! never "nothing was written"; a backend whose 503 promises the request
//! was not applied (S3's `SlowDown`, Azure's `ServerBusy`) says so with an
//! override.

use std::ops::RangeInclusive;

use super::WriteOutcome;
use crate::{BoxError, Error, Result};

/// The request an answer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// A read of the frame header only (a ranged read, or a HEAD).
    Head,
    /// A whole read (possibly in ranges conditional on the first's version).
    Read,
    /// A conditional write that must not find the object (`If-None-Match:
    /// *`, `ifGenerationMatch=0`).
    Create,
    /// A conditional write on the version read (`If-Match`,
    /// `ifGenerationMatch=<generation>`). A backend that does not tell
    /// creates from updates apart names every write an update.
    Update,
}

impl Request {
    /// Whether the request writes.
    pub const fn is_write(self) -> bool {
        matches!(self, Self::Create | Self::Update)
    }
}

/// What an answer means to the fenced-write loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// The object does not exist (a read's 404).
    Absent,
    /// A ranged read of an empty object (416): it exists, with no frame.
    EmptyRange,
    /// The write's precondition did not hold: another writer got in
    /// between. Nothing was written; read again and decide again.
    LostRace,
    /// Not applied, and trying again may work (throttled, busy, a read
    /// that failed on the server).
    Retryable,
    /// A write that may have been applied: read back before deciding.
    OutcomeUnknown,
    /// Not applied, and trying again will not help (credentials,
    /// permissions, a missing bucket, a bad request).
    Permanent,
}

/// Which error codes an [`Override`] matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    Any,
    Is(&'static str),
    Missing,
}

/// Which requests an [`Override`] matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requests {
    All,
    Writes,
}

/// One backend's exception to the default table: for a status (range),
/// perhaps only with an error code, perhaps only for writes, a meaning.
/// A backend lists its overrides in order; the first that matches wins.
///
/// ```
/// use fencing_core::adapter::blob::http::{Meaning, Override, Request, meaning};
///
/// // Azure: only ConditionNotMet among 412s is a lost race.
/// const AZURE: &[Override] = &[
///     Override::status(412).code("ConditionNotMet").means(Meaning::LostRace),
///     Override::status(412).code_missing().means(Meaning::LostRace),
///     Override::status(412).means(Meaning::Permanent),
/// ];
/// let lease_missing = meaning(Request::Update, 412, Some("LeaseIdMissing"), AZURE);
/// assert_eq!(lease_missing, Meaning::Permanent);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    statuses: RangeInclusive<u16>,
    code: Code,
    requests: Requests,
    meaning: Meaning,
}

impl Override {
    /// An override for one status; [`Permanent`](Meaning::Permanent) until
    /// [`means`](Self::means) says otherwise.
    pub const fn status(status: u16) -> Self {
        Self::statuses(status, status)
    }

    /// An override for the statuses `low..=high`.
    pub const fn statuses(low: u16, high: u16) -> Self {
        Self {
            statuses: RangeInclusive::new(low, high),
            code: Code::Any,
            requests: Requests::All,
            meaning: Meaning::Permanent,
        }
    }

    /// Only when the backend's error code is `code`.
    #[must_use]
    pub const fn code(mut self, code: &'static str) -> Self {
        self.code = Code::Is(code);
        self
    }

    /// Only when the answer carries no error code.
    #[must_use]
    pub const fn code_missing(mut self) -> Self {
        self.code = Code::Missing;
        self
    }

    /// Only for writes ([`Request::Create`], [`Request::Update`]).
    #[must_use]
    pub const fn writes(mut self) -> Self {
        self.requests = Requests::Writes;
        self
    }

    /// What the matching answers mean.
    #[must_use]
    pub const fn means(mut self, meaning: Meaning) -> Self {
        self.meaning = meaning;
        self
    }

    fn matches(&self, request: Request, status: u16, code: Option<&str>) -> bool {
        self.statuses.contains(&status)
            && match self.requests {
                Requests::All => true,
                Requests::Writes => request.is_write(),
            }
            && match self.code {
                Code::Any => true,
                Code::Is(want) => code == Some(want),
                Code::Missing => code.is_none(),
            }
    }
}

/// What `status` (with the backend's error `code`, if any) means for
/// `request`: the first matching override, else the default table.
pub fn meaning(
    request: Request,
    status: u16,
    code: Option<&str>,
    overrides: &[Override],
) -> Meaning {
    if let Some(o) = overrides.iter().find(|o| o.matches(request, status, code)) {
        return o.meaning;
    }
    let write = request.is_write();
    match (status, request) {
        (404, Request::Head | Request::Read) => Meaning::Absent,
        // `If-Match` on an object deleted meanwhile.
        (404, Request::Update) => Meaning::LostRace,
        (412, _) if write => Meaning::LostRace,
        (416, Request::Head) => Meaning::EmptyRange,
        (429, _) => Meaning::Retryable,
        (408 | 500..=599, _) if write => Meaning::OutcomeUnknown,
        (408 | 500..=599, _) => Meaning::Retryable,
        // 400, 401, 403, a create's 404 (no bucket), a read's 412 …
        _ => Meaning::Permanent,
    }
}

/// What a failure means to the fenced-write loop, as every object-store
/// adapter reports it to its `BlobBackend` methods.
#[derive(Debug)]
pub enum Failure {
    /// The object is absent (a read's 404). Only for reads.
    NotFound,
    /// The condition did not hold; nothing was written. On a read in
    /// conditional ranges: the object changed between two ranges.
    PreconditionFailed,
    /// A ranged read of an empty object (so it has no frame). Only for
    /// `Head`.
    EmptyRange,
    /// Anything else, as the [`Error`] to return.
    Error(Error),
}

impl Failure {
    /// A conditional write's failure as
    /// [`BlobBackend::write`](super::BlobBackend::write) returns it: a lost
    /// race is [`WriteOutcome::PreconditionFailed`]; "absent" cannot answer
    /// a write, so it is a permanent error.
    pub fn into_write_outcome(self, backend: &'static str, key: &str) -> Result<WriteOutcome> {
        match self {
            Self::PreconditionFailed => Ok(WriteOutcome::PreconditionFailed),
            Self::NotFound | Self::EmptyRange => Err(Error::backend(
                backend,
                false,
                format!("unexpected 'not found' writing {key:?}"),
            )),
            Self::Error(e) => Err(e),
        }
    }

    /// The failure in a few words (`not found`, `empty`, `precondition`,
    /// `backend retryable=<bool>`, `unknown`, else the error's `Debug`), as
    /// the adapters' classification tables name what they expect.
    pub fn describe(&self) -> String {
        match self {
            Self::NotFound => "not found".into(),
            Self::EmptyRange => "empty".into(),
            Self::PreconditionFailed => "precondition".into(),
            Self::Error(Error::Backend { retryable, .. }) => {
                format!("backend retryable={retryable}")
            }
            Self::Error(Error::OutcomeUnknown { .. }) => "unknown".into(),
            Self::Error(Error::Unauthenticated { .. }) => "unauthenticated".into(),
            Self::Error(Error::Tls { .. }) => "tls".into(),
            Self::Error(e) => format!("{e:?}"),
        }
    }
}

/// The [`Failure`] for an answer with an HTTP `status`: [`meaning`] turned
/// into what the loop acts on. `source` (the SDK's error) is kept as the
/// error's `source()`; `operation` names the write for
/// [`Error::OutcomeUnknown`], and is only called for one.
pub fn failure<E: Into<BoxError>>(
    backend: &'static str,
    request: Request,
    status: u16,
    code: Option<&str>,
    overrides: &[Override],
    operation: impl FnOnce() -> String,
    source: E,
) -> Failure {
    match meaning(request, status, code, overrides) {
        Meaning::Absent => Failure::NotFound,
        Meaning::EmptyRange => Failure::EmptyRange,
        Meaning::LostRace => {
            tracing::debug!(backend, ?request, status, code, "precondition failed");
            Failure::PreconditionFailed
        }
        Meaning::Retryable => Failure::Error(Error::backend(backend, true, source)),
        Meaning::Permanent => Failure::Error(Error::backend(backend, false, source)),
        Meaning::OutcomeUnknown => {
            Failure::Error(Error::outcome_unknown(backend, operation(), source))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Meaning::*;
    use super::Request::*;
    use super::*;

    const ALL: [Request; 4] = [Head, Read, Create, Update];

    /// The default table, row by row.
    #[test]
    fn the_default_table() {
        let rows: &[(u16, [Meaning; 4])] = &[
            (404, [Absent, Absent, Permanent, LostRace]),
            (412, [Permanent, Permanent, LostRace, LostRace]),
            (416, [EmptyRange, Permanent, Permanent, Permanent]),
            (429, [Retryable; 4]),
            (408, [Retryable, Retryable, OutcomeUnknown, OutcomeUnknown]),
            (500, [Retryable, Retryable, OutcomeUnknown, OutcomeUnknown]),
            (503, [Retryable, Retryable, OutcomeUnknown, OutcomeUnknown]),
            (599, [Retryable, Retryable, OutcomeUnknown, OutcomeUnknown]),
            (400, [Permanent; 4]),
            (401, [Permanent; 4]),
            (403, [Permanent; 4]),
            (409, [Permanent; 4]),
            (200, [Permanent; 4]),
            (304, [Permanent; 4]),
        ];
        for (status, want) in rows {
            for (request, want) in ALL.into_iter().zip(want) {
                assert_eq!(
                    meaning(request, *status, None, &[]),
                    *want,
                    "{request:?} {status}"
                );
                // A code alone changes nothing without an override.
                assert_eq!(meaning(request, *status, Some("Whatever"), &[]), *want);
            }
        }
    }

    #[test]
    fn overrides_match_status_code_and_writes_and_the_first_wins() {
        const O: &[Override] = &[
            Override::status(409)
                .code("ConditionalRequestConflict")
                .writes()
                .means(LostRace),
            Override::status(409).means(Retryable),
            Override::status(412).code_missing().means(OutcomeUnknown),
            Override::statuses(200, 399).writes().means(OutcomeUnknown),
        ];
        let m = |request, status, code| meaning(request, status, code, O);
        assert_eq!(m(Update, 409, Some("ConditionalRequestConflict")), LostRace);
        assert_eq!(m(Create, 409, Some("ConditionalRequestConflict")), LostRace);
        // Not a write: the next override.
        assert_eq!(m(Read, 409, Some("ConditionalRequestConflict")), Retryable);
        assert_eq!(m(Update, 409, Some("OperationAborted")), Retryable);
        assert_eq!(m(Update, 409, None), Retryable);
        assert_eq!(m(Update, 412, None), OutcomeUnknown);
        // A code where none is wanted: the default.
        assert_eq!(m(Update, 412, Some("PreconditionFailed")), LostRace);
        assert_eq!(m(Update, 200, None), OutcomeUnknown);
        assert_eq!(m(Update, 399, None), OutcomeUnknown);
        assert_eq!(m(Read, 200, None), Permanent);
        // Statuses no override names keep the default.
        assert_eq!(m(Read, 404, None), Absent);
        assert_eq!(m(Update, 503, None), OutcomeUnknown);
        // The default meaning of an override is permanent.
        assert_eq!(
            meaning(Update, 503, None, &[Override::status(503)]),
            Permanent
        );
    }

    #[test]
    fn failures_carry_the_source_and_name_the_write() {
        let fail = |request, status| {
            failure(
                "s3",
                request,
                status,
                None,
                &[],
                || "conditional PutObject s3://b/k".to_owned(),
                "the answer",
            )
        };
        assert!(matches!(fail(Read, 404), Failure::NotFound));
        assert!(matches!(fail(Head, 416), Failure::EmptyRange));
        assert!(matches!(fail(Update, 412), Failure::PreconditionFailed));
        match fail(Update, 500) {
            Failure::Error(e @ Error::OutcomeUnknown { .. }) => {
                assert!(e.to_string().contains("s3://b/k"), "{e}");
                assert_eq!(
                    std::error::Error::source(&e).unwrap().to_string(),
                    "the answer"
                );
            }
            other => panic!("{other:?}"),
        }
        match fail(Read, 500) {
            Failure::Error(
                e @ Error::Backend {
                    retryable: true, ..
                },
            ) => {
                assert!(std::error::Error::source(&e).is_some());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            fail(Update, 403),
            Failure::Error(Error::Backend {
                retryable: false,
                backend: "s3",
                ..
            })
        ));
        // The operation is only described for an unknown outcome.
        let described = std::cell::Cell::new(false);
        let _ = failure(
            "gcs",
            Read,
            500,
            None,
            &[],
            || {
                described.set(true);
                String::new()
            },
            "x",
        );
        assert!(!described.get());
    }
}
