//! Fencing tokens for storage on [Apache OpenDAL](opendal): a
//! [`FencingLayer`] whose every write carries a fencing token and is
//! refused at the store below the path's mark.
//!
//! Programs that keep their state in object stores through OpenDAL
//! (manifests, checkpoints, WAL segments) add one layer, bound to the
//! writer's lease, and a writer that was paused past its lease (a GC, a VM
//! freeze) cannot overwrite what the next holder wrote: its write is refused
//! at the store, naming both tokens, and nothing is written.
//!
//! ```no_run
//! # async fn open(issuer: std::sync::Arc<dyn fencing_core::TokenIssuer>, s3: impl opendal::Builder) -> Result<(), Box<dyn std::error::Error>> {
//! use fencing_core::IssuerExt;
//! use fencing_opendal::FencingLayer;
//! use opendal::Operator;
//!
//! let guard = issuer.lock("db/writer").acquire().await?;
//! let op = Operator::new(s3)?.layer(FencingLayer::new(guard.watch())); // the one line
//! op.write("db/manifest", "v2").await?;
//! # Ok(())
//! # }
//! ```
//!
//! The service underneath must condition a write on an object's ETag and
//! on its absence (`write_with_if_match`, and `write_with_if_not_exists` or
//! `write_with_if_none_match`). On one that says it cannot (OpenDAL's
//! `Memory`, say) the first write is refused with
//! [`fencing_core::Error::Unsupported`] and nothing is written; reads work.
//! Those are capability flags, set for every endpoint of a service: whether
//! the server honours the conditions (s3rver does not), only [`verify`]
//! proves. Run it once per deployment.
//!
//! ```
//! use fencing_core::FencingToken;
//! use fencing_opendal::{FencingLayer, fencing_error};
//! use opendal::Operator;
//! use opendal::services::Memory;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> opendal::Result<()> {
//! let op = Operator::new(Memory::default())?.layer(FencingLayer::new(FencingToken::new(7)));
//! // Memory has no conditional writes on an ETag: nothing could stop a stale writer.
//! let refused = op.write("db/manifest", "v1").await.unwrap_err();
//! assert_eq!(refused.kind(), opendal::ErrorKind::Unsupported);
//! assert!(matches!(fencing_error(&refused), Some(fencing_core::Error::Unsupported { .. })));
//! assert!(!op.exists("db/manifest").await?);
//! # Ok(())
//! # }
//! ```
//!
//! # What each operation does
//!
//! Every object written through the layer starts with the 17-byte fencing
//! frame (`"fencing1"`, the token as a big-endian `u64`, `v` for a value or
//! `m` for a tombstone), byte for byte what `fencing_core`'s `BlobStore` and
//! `fencing_object_store`'s `FencedObjectStore` write: S3's ETag is the MD5
//! of the body, so the version a conditional write compares covers the
//! token.
//!
//! - **write**: the writer's chunks are kept in memory and written at
//!   `close` as one request. The token is the source's at that moment (a
//!   lost lease: [`LeaseLost`](fencing_core::Error::LeaseLost), nothing
//!   written), checked against the limits; then the object's frame is read
//!   (one ranged read, which answers with the ETag), a token below its mark
//!   is refused with [`StaleToken`](fencing_core::Error::StaleToken)
//!   naming both tokens (nothing written), and the framed body is written
//!   with `if_match(etag)` (or `if_not_exists` where there is no object). A
//!   write that loses that condition to another writer reads again (a
//!   jittered pause) up to [`with_max_attempts`](FencingLayer::with_max_attempts)
//!   times, then gives up with [`Contention`](fencing_core::Error::Contention).
//!   The ETag of the layer's own last write to a path is remembered, so the
//!   same holder's next write is one request. This is the core's one
//!   [conditional-write engine](fencing_core::adapter::cas), which
//!   `BlobStore` and `FencedObjectStore` run too. The caller's conditions keep
//!   their meaning on top: `if_not_exists` / `if_none_match("*")` creates
//!   (absent or deleted only, else `ConditionNotMatch`), `if_match(etag)` is
//!   the caller's compare-and-swap (`ConditionNotMatch` when lost, never
//!   retried), `if_none_match(etag)` refuses that version.
//! - **read**, **stat**: the frame is hidden (ranges shifted past it, sizes
//!   less it). A bounded read ending in the first 64 KiB is one request from
//!   the object's first byte; further in, the frame is read first and the
//!   bytes then on its ETag. A tombstone is `NotFound`; an object without
//!   the frame is refused with [`Unfenced`](fencing_core::Error::Unfenced)
//!   unless [`adopt_unfenced`](FencingLayer::adopt_unfenced) (mark 0).
//!   `stat` is a ranged read of the frame (the same metadata).
//! - **delete**: a tombstone (the frame with `m`, no value) at the token,
//!   which keeps the mark: a zombie's later write is still refused, and
//!   reads, `stat` and `list` treat the path as absent. A stale token is
//!   refused. `if_match` is supported; a recursive delete tombstones every
//!   live object listed under the path.
//! - **list**: tombstones hidden (an object of exactly 17 bytes has its
//!   frame read; a longer one is a value, its size less 17), sizes the
//!   caller's; a directory is listed only if something under it is live.
//! - **copy**, **rename**: a read through the layer and a fenced write at
//!   the destination (its conditions: `if_not_exists`, `if_match`); rename
//!   refuses a token below the source's mark before writing anything, then
//!   leaves a tombstone at the source (a copy and a delete: not atomic).
//! - **create_dir**: passed through (a directory holds no value), and a
//!   delete of a path ending in `/` deletes the directory object; both are
//!   refused where an object carrying a frame is at that path.
//!
//! # What is refused, and why
//!
//! With [`fencing_core::Error::Unsupported`] inside an
//! [`ErrorKind::Unsupported`](opendal::ErrorKind::Unsupported) error,
//! nothing sent:
//! - **append** writes: an appended part is not conditioned on the object's
//!   version, so it would bypass the token check.
//! - **multipart** uploads are not refused but staged: the layer reports no
//!   `write_can_multi`, keeps every chunk in memory and writes the whole
//!   object at `close` in one conditional `PUT` (S3 cannot condition the
//!   parts of a multipart upload; a part sent before the check would be
//!   beyond it). The `chunk` option only changes how the chunks arrive.
//! - **presign**: a presigned write is not fenced, a presigned read returns
//!   the frame.
//! - **compose**, **restore**, deleting or listing **versions**: each could
//!   bring back or show bytes below the current mark.
//! - **version conditions** on writes (`if_version_match`): use `if_match`.
//!
//! # Errors
//!
//! The layer's own errors are [`fencing_core::Error`]s carried as the source
//! of an [`opendal::Error`], whose message quotes them:
//! [`fencing_error`] finds them. A stale token and a lost lease are
//! [`PermissionDenied`](opendal::ErrorKind::PermissionDenied), never
//! `ConditionNotMatch` (which callers read as a lost compare-and-swap to
//! retry); bad input is `ConfigInvalid`; contention is a temporary
//! `Unexpected`. A write whose request failed after it was sent, in a way
//! that may have been applied, is read again and, where the token is still
//! not below the object's mark, written again on the ETag read (landing
//! settles it); where it is below, or nothing answers,
//! [`OutcomeUnknown`](fencing_core::Error::OutcomeUnknown), never "nothing
//! written".
//! A create over a newer holder's live object is `ConditionNotMatch` (what
//! the caller's protocol stops on), its stale token the source
//! [`fencing_error`] finds. Every error the layer returns carries only the
//! redacted text of the service's error (no signed URL through `Display`,
//! `Debug` or `source()`), its kind kept.
//!
//! A `RetryLayer` must sit above (outside) this layer
//! (`.layer(FencingLayer::new(..)).layer(RetryLayer::new())`) so that a
//! retry reads the frame again.

mod core;
mod delete;
mod error;
mod head;
mod layer;
mod list;
mod md5;
mod read;
mod service;
mod verify;
mod write;

pub use error::fencing_error;
pub use fencing_core::keepalive::TokenSource;
pub use layer::{DEFAULT_LIMITS, FencingLayer};
pub use verify::{PROBE_KEY, verify};
