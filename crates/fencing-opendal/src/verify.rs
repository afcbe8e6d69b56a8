//! [`verify`]: whether the service under an operator honours the
//! conditional writes fencing stands on.

use fencing_core::adapter::blob::BlobMeta;
use fencing_core::adapter::blob::frame;
use fencing_core::redact::redact_text;
use fencing_core::safety::SafetyCheck;
use fencing_core::{Error, FencingToken};
use opendal::{ErrorKind, Operator};

use crate::error::LAYER;

/// The key `verify` writes its probe under.
pub const PROBE_KEY: &str = "fencing-verify/probe";

/// Proves that the server under `op` refuses a write whose condition fails:
/// a write under an `If-Match` that cannot match, and an `If-None-Match: *`
/// (`if_not_exists`) over an existing object, must both be refused. Each is
/// a [`SafetyCheck`]: a pass, or unsafe naming what the server `APPLIED`.
///
/// OpenDAL reports conditional writes for every endpoint of a service (S3's
/// for every S3-compatible server), whether or not the server honours them;
/// on one that ignores them (s3rver, some gateways), a paused writer's
/// write is applied and the mark goes down. Run this once per deployment
/// (per bucket and endpoint) before fencing on it.
///
/// The probe goes to the service under `op`'s layers (a `FencingLayer` or a
/// `RetryLayer` on `op` is not in its way): it writes [`PROBE_KEY`] (a
/// framed object at mark 0), then the two writes that must be refused.
///
/// # Errors
/// A service without conditional writes (OpenDAL's `Memory`) is
/// [`Error::Unsupported`]; a failed request, [`Error::Backend`] (its text
/// redacted).
pub async fn verify(op: &Operator) -> fencing_core::Result<Vec<SafetyCheck>> {
    let raw = Operator::from_parts(op.base_context().clone(), op.base_service().clone());
    let info = raw.info();
    let cap = info.capability();
    let create_only = cap.write_with_if_not_exists || cap.write_with_if_none_match;
    if !cap.write || !cap.write_with_if_match || !create_only {
        return Err(Error::Unsupported {
            backend: info.scheme(),
            operation: "conditional writes on an object's ETag and on its absence \
                        (write_with_if_match, and write_with_if_not_exists or \
                        write_with_if_none_match), which fencing needs",
        });
    }
    let body = frame::encode(
        BlobMeta {
            token: FencingToken::ZERO,
            has_value: true,
        },
        b"fencing verify probe",
    );
    raw.write(PROBE_KEY, body.clone()).await.map_err(backend)?;
    let name = info.scheme();
    let mut checks = Vec::new();
    let unmatchable = "\"fencing-verify-unmatchable-etag\"";
    for case in [Case::StaleVersion, Case::CreateOnly] {
        let write = raw.write_with(PROBE_KEY, body.clone());
        let write = match case {
            Case::StaleVersion => write.if_match(unmatchable),
            Case::CreateOnly if cap.write_with_if_not_exists => write.if_not_exists(true),
            Case::CreateOnly => write.if_none_match("*"),
        };
        let check = case.check();
        checks.push(match write.await {
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConditionNotMatch | ErrorKind::AlreadyExists | ErrorKind::Conflict
                ) =>
            {
                SafetyCheck::pass(check, format!("{name} answered: precondition failed"))
            }
            Err(e) => return Err(backend(e)),
            Ok(_) => SafetyCheck::unsafe_(
                check,
                format!(
                    "{name} APPLIED a write whose precondition ({}) cannot hold: this server \
                     ignores conditional-write headers, so racing writers can overwrite each \
                     other and a stale token can win. Do not fence on it.",
                    case.precondition(),
                ),
            ),
        });
    }
    Ok(checks)
}

#[derive(Clone, Copy)]
enum Case {
    StaleVersion,
    CreateOnly,
}

impl Case {
    fn check(self) -> &'static str {
        match self {
            Self::StaleVersion => "refuses a write under a stale version (If-Match)",
            Self::CreateOnly => {
                "refuses a create-only write over an existing object (If-None-Match: *)"
            }
        }
    }

    fn precondition(self) -> &'static str {
        match self {
            Self::StaleVersion => "If-Match on an ETag the object does not have",
            Self::CreateOnly => "If-None-Match: * on an object that exists",
        }
    }
}

fn backend(e: opendal::Error) -> Error {
    Error::backend(
        LAYER,
        e.is_temporary(),
        redact_text(&format!("verify's probe at {PROBE_KEY}: {e}")),
    )
}
