//! object_store's own conformance functions, run against a
//! [`FencedObjectStore`](crate::FencedObjectStore) (feature `conformance`).
//!
//! [`object_store_suite!`](crate::object_store_suite) expands to one
//! `#[tokio::test]` per function of `object_store::integration` that a
//! fenced store can run; [`NOT_RUN`] names the others and why. The crate
//! README's table is checked against both, and both against
//! object_store's source, by this crate's tests.
//!
//! [`Hooked`] is the store the fault tests put underneath: it counts
//! requests and changes a put's answer.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::SeqCst;

use async_trait::async_trait;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// The functions of `object_store::integration` that
/// [`object_store_suite!`](crate::object_store_suite) runs, one test each.
pub const RUN: &[&str] = &[
    "put_get_delete_list",
    "put_get_attributes",
    "get_opts",
    "put_opts",
    "stream_get",
    "list_uses_directories_correctly",
    "list_with_delimiter",
    "get_nonexistent_object",
    "rename_and_copy",
    "copy_if_not_exists",
    "copy_rename_nonexistent_object",
    "multipart_race_condition",
    "multipart_out_of_order",
    "list_with_offset_exclusivity",
];

/// The functions of `object_store::integration` that are not run, and why.
pub const NOT_RUN: &[(&str, &str)] = &[
    (
        "multipart",
        "needs a `MultipartStore`: its parts are uploaded to the store by id before any check, \
         and the store cannot condition their completion",
    ),
    (
        "multipart_with_opts",
        "needs a `MultipartStore` (as `multipart`)",
    ),
    (
        "multipart_put_part_out_of_order",
        "needs a `MultipartStore` (as `multipart`)",
    ),
    (
        "list_paginated",
        "needs a `PaginatedListStore`: a page of the store's listing cannot hide tombstones \
         without changing the page's size and token",
    ),
];

/// One `#[tokio::test]` per conformance function a fenced store runs, on
/// the store `$store().await` returns (an `Option<Arc<dyn ObjectStore>>`
/// that is `None` when the run asked to skip it; each test gets its own,
/// so give each a fresh bucket or prefix).
///
/// `object_store_suite!(store)` runs them all ([`RUN`]); `object_store_suite!(store, except_attributes)` leaves out
/// `put_get_attributes`, for a server that does not keep them (moto drops
/// user metadata: object_store's own client fails the case there too).
#[macro_export]
macro_rules! object_store_suite {
    ($store:path) => {
        $crate::object_store_suite!(@list all, $store);
    };
    ($store:path, except_attributes) => {
        $crate::object_store_suite!(@list except_attributes, $store);
    };
    (@list $mode:ident, $store:path) => {
        $crate::object_store_suite! { @cases $mode, $store;
            core put_get_delete_list(s) => ::object_store::integration::put_get_delete_list(&*s).await;
            attributes put_get_attributes(s) => ::object_store::integration::put_get_attributes(&*s).await;
            core get_opts(s) => ::object_store::integration::get_opts(&*s).await;
            core put_opts(s) => ::object_store::integration::put_opts(&*s, true).await;
            core stream_get(s) => ::object_store::integration::stream_get(&*s).await;
            core list_uses_directories_correctly(s) =>
                ::object_store::integration::list_uses_directories_correctly(&*s).await;
            core list_with_delimiter(s) => ::object_store::integration::list_with_delimiter(&*s).await;
            core get_nonexistent_object(s) => {
                let err = ::object_store::integration::get_nonexistent_object(&*s, None)
                    .await
                    .unwrap_err();
                assert!(matches!(err, ::object_store::Error::NotFound { .. }), "{err}");
            };
            core rename_and_copy(s) => ::object_store::integration::rename_and_copy(&*s).await;
            core copy_if_not_exists(s) => ::object_store::integration::copy_if_not_exists(&*s).await;
            core copy_rename_nonexistent_object(s) =>
                ::object_store::integration::copy_rename_nonexistent_object(&*s).await;
            core multipart_race_condition(s) =>
                ::object_store::integration::multipart_race_condition(&*s, true).await;
            core multipart_out_of_order(s) =>
                ::object_store::integration::multipart_out_of_order(&*s).await;
            core list_with_offset_exclusivity(s) =>
                ::object_store::integration::list_with_offset_exclusivity(&*s).await;
        }
    };
    (@cases $mode:ident, $store:path; $($kind:ident $name:ident($s:ident) => $body:expr;)*) => {
        $( $crate::object_store_suite!(@one $mode $kind $name $s $store => $body); )*
    };
    (@one except_attributes attributes $name:ident $s:ident $store:path => $body:expr) => {};
    (@one $mode:ident $kind:ident $name:ident $s:ident $store:path => $body:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let Some($s) = $store().await else { return };
            let $s: ::std::sync::Arc<dyn ::object_store::ObjectStore> = $s;
            $body;
        }
    };
}

/// What a hook on a put's answer returns: the answer the caller sees.
pub type PutAnswer = futures_util::future::BoxFuture<'static, object_store::Result<PutResult>>;

/// An [`ObjectStore`] for tests of what runs on top of it: every call
/// forwarded to `inner`, gets and puts counted, and each put's answer
/// handed to a hook before the caller sees it (to lose it after the write
/// landed, or to let a newer holder act between two requests of one call).
pub struct Hooked {
    inner: Arc<dyn ObjectStore>,
    gets: AtomicU32,
    puts: AtomicU32,
    after_put: PutHook,
}

/// [`Hooked::after_put`]'s hook.
type PutHook = Box<dyn Fn(&Path, object_store::Result<PutResult>) -> PutAnswer + Send + Sync>;

impl Hooked {
    /// `inner`, with the answers of its puts as they are.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        Self {
            inner,
            gets: AtomicU32::new(0),
            puts: AtomicU32::new(0),
            after_put: Box::new(|_, answer| Box::pin(std::future::ready(answer))),
        }
    }

    /// Runs `hook` on every put's path and answer (the put was sent and
    /// answered by `inner`); what it returns is the caller's answer.
    #[must_use]
    pub fn after_put(
        mut self,
        hook: impl Fn(&Path, object_store::Result<PutResult>) -> PutAnswer + Send + Sync + 'static,
    ) -> Self {
        self.after_put = Box::new(hook);
        self
    }

    /// The gets and puts sent since the last call.
    pub fn take_requests(&self) -> (u32, u32) {
        (self.gets.swap(0, SeqCst), self.puts.swap(0, SeqCst))
    }
}

impl fmt::Debug for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hooked({})", self.inner)
    }
}

impl fmt::Display for Hooked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[async_trait]
impl ObjectStore for Hooked {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.puts.fetch_add(1, SeqCst);
        let answer = self.inner.put_opts(location, payload, opts).await;
        (self.after_put)(location, answer).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.gets.fetch_add(1, SeqCst);
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
