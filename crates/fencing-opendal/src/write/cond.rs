//! What a caller's write asks of the object it replaces (create-only,
//! an ETag to match) and what it carries along (its attributes).

use std::collections::HashMap;

use opendal::raw::{OpCopy, OpWrite};
use opendal::{Capability, ErrorKind, Metadata, Result};

use crate::error::refused;

/// What a write requires of the object it replaces, beyond the mark rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Cond {
    /// Any object, or none.
    Overwrite,
    /// `if_not_exists` / `if_none_match("*")`: none, or a tombstone (absent
    /// to the caller).
    Create,
    /// `if_match(etag)`: the caller's compare-and-swap on a live object.
    Match(String),
    /// `if_none_match(etag)`: anything but a live object at that ETag.
    NoneMatch(String),
    /// A delete: a tombstone, unless one at this token is there already.
    Delete,
    /// A delete with `if_match(etag)`: only of the live object at that ETag.
    DeleteMatch(String),
}

impl Cond {
    /// The conditions of a caller's write.
    pub(crate) fn of_write(args: &OpWrite) -> Result<Self> {
        if args.if_version_match().is_some() || args.if_version_not_match().is_some() {
            return Err(refused(
                "version conditions on writes (use if_match with the ETag stat returns)",
            ));
        }
        Self::of(args.if_match(), args.if_none_match(), args.if_not_exists())
    }

    /// The conditions of a caller's copy, on its destination.
    pub(crate) fn of_copy(args: &OpCopy) -> Result<Self> {
        if args.if_version_match().is_some() || args.if_version_not_match().is_some() {
            return Err(refused(
                "version conditions on copies (use if_match with the ETag stat returns)",
            ));
        }
        Self::of(args.if_match(), args.if_none_match(), args.if_not_exists())
    }

    fn of(
        if_match: Option<&str>,
        if_none_match: Option<&str>,
        if_not_exists: bool,
    ) -> Result<Self> {
        let create = if_not_exists || if_none_match == Some("*");
        match (if_match, if_none_match) {
            (Some(_), _) if create => Err(contradiction("if_match and if_not_exists")),
            (Some(_), Some(_)) => Err(contradiction("if_match and if_none_match")),
            (Some(etag), None) => Ok(Self::Match(etag.to_owned())),
            (None, _) if create => Ok(Self::Create),
            (None, Some(etag)) => Ok(Self::NoneMatch(etag.to_owned())),
            (None, None) => Ok(Self::Overwrite),
        }
    }
}

pub(super) fn contradiction(what: &str) -> opendal::Error {
    opendal::Error::new(
        ErrorKind::ConfigInvalid,
        format!("{what} together are not supported by the fencing layer; nothing was written"),
    )
}

/// The caller's failed condition: `ConditionNotMatch`, which is what it
/// means here (never a stale token).
pub(super) fn condition_not_match(path: &str, why: &str) -> opendal::Error {
    opendal::Error::new(ErrorKind::ConditionNotMatch, why).with_context("path", path)
}

/// The attributes a write stores beside the value.
#[derive(Clone, Debug, Default)]
pub(crate) struct Attrs {
    pub(super) content_type: Option<String>,
    pub(super) content_disposition: Option<String>,
    pub(super) content_encoding: Option<String>,
    pub(super) cache_control: Option<String>,
    pub(super) user_metadata: Option<HashMap<String, String>>,
    pub(super) concurrent: usize,
}

impl Attrs {
    /// The attributes the caller gave its write.
    pub(super) fn of_write(args: &OpWrite) -> Self {
        Self {
            content_type: args.content_type().map(str::to_owned),
            content_disposition: args.content_disposition().map(str::to_owned),
            content_encoding: args.content_encoding().map(str::to_owned),
            cache_control: args.cache_control().map(str::to_owned),
            user_metadata: args.user_metadata().map(|m| {
                m.into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            }),
            concurrent: args.concurrent(),
        }
    }

    /// A copy's: the source's, those the service can write.
    pub(super) fn of_source(meta: &Metadata, cap: &Capability) -> Self {
        let keep = |ok: bool, v: Option<&str>| v.filter(|_| ok).map(str::to_owned);
        Self {
            content_type: keep(cap.write_with_content_type, meta.content_type()),
            content_disposition: keep(
                cap.write_with_content_disposition,
                meta.content_disposition(),
            ),
            content_encoding: keep(cap.write_with_content_encoding, meta.content_encoding()),
            cache_control: keep(cap.write_with_cache_control, meta.cache_control()),
            user_metadata: meta
                .user_metadata()
                .filter(|m| cap.write_with_user_metadata && !m.is_empty())
                .map(|m| {
                    m.into_iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect()
                }),
            concurrent: 1,
        }
    }
}
