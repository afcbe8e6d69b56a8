//! An object's version as object_store names it ([`UpdateVersion`]: an ETag,
//! a generation, or both) carried in a [`BlobVersion`] string and back.

use fencing_core::adapter::blob::BlobVersion;
use object_store::{ObjectMeta, PutResult, UpdateVersion};

/// Between the ETag and the version: a byte no HTTP header value holds.
const SEPARATOR: char = '\n';

/// The version a conditional write on `meta`'s object must match.
pub(crate) fn of_meta(meta: &ObjectMeta) -> UpdateVersion {
    UpdateVersion {
        e_tag: meta.e_tag.clone(),
        version: meta.version.clone(),
    }
}

/// The version a write's answer names.
pub(crate) fn of_put(result: &PutResult) -> UpdateVersion {
    UpdateVersion {
        e_tag: result.e_tag.clone(),
        version: result.version.clone(),
    }
}

/// `version` as one string (S3, Azure and `InMemory` match on the ETag,
/// GCS on the generation: both are kept).
pub(crate) fn to_blob(version: &UpdateVersion) -> BlobVersion {
    let e_tag = version.e_tag.as_deref().unwrap_or_default();
    let version = version.version.as_deref().unwrap_or_default();
    BlobVersion::new(format!("{e_tag}{SEPARATOR}{version}"))
}

/// The [`UpdateVersion`] of a string [`to_blob`] made.
pub(crate) fn from_blob(version: &BlobVersion) -> UpdateVersion {
    let (e_tag, version) = version
        .as_str()
        .split_once(SEPARATOR)
        .unwrap_or((version.as_str(), ""));
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    UpdateVersion {
        e_tag: some(e_tag),
        version: some(version),
    }
}

/// A version as the [write engine](fencing_core::adapter::cas) compares
/// it: equal where [`matches`] says so.
#[derive(Clone, Debug)]
pub(crate) struct Ver(pub(crate) UpdateVersion);

impl PartialEq for Ver {
    /// `other` is the caller's expected version where there is one.
    fn eq(&self, other: &Self) -> bool {
        matches(&other.0, &self.0)
    }
}

/// Whether a caller's expected version names the object at `current`:
/// on the ETag where the caller gave one, else on the version.
pub(crate) fn matches(expected: &UpdateVersion, current: &UpdateVersion) -> bool {
    match (&expected.e_tag, &expected.version) {
        (Some(e_tag), _) if current.e_tag.is_some() => current.e_tag.as_ref() == Some(e_tag),
        (_, Some(version)) => current.version.as_ref() == Some(version),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_survives_the_round_trip() {
        for (e_tag, version) in [
            (Some("\"abc\""), Some("17")),
            (Some("\"abc\""), None),
            (None, Some("1733300000000000")),
            (None, None),
        ] {
            let v = UpdateVersion {
                e_tag: e_tag.map(str::to_owned),
                version: version.map(str::to_owned),
            };
            let back = from_blob(&to_blob(&v));
            assert_eq!((back.e_tag, back.version), (v.e_tag, v.version));
        }
    }

    #[test]
    fn a_version_matches_on_its_etag_else_its_generation() {
        let v = |e: Option<&str>, g: Option<&str>| UpdateVersion {
            e_tag: e.map(str::to_owned),
            version: g.map(str::to_owned),
        };
        assert!(matches(&v(Some("a"), None), &v(Some("a"), Some("1"))));
        assert!(!matches(&v(Some("a"), None), &v(Some("b"), Some("1"))));
        assert!(matches(&v(None, Some("1")), &v(Some("b"), Some("1"))));
        assert!(!matches(&v(None, Some("1")), &v(Some("b"), Some("2"))));
        assert!(!matches(&v(None, None), &v(Some("b"), Some("2"))));
    }
}
