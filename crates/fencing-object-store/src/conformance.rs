//! object_store's own conformance functions, run against a
//! [`FencedObjectStore`](crate::FencedObjectStore) (feature `conformance`).
//!
//! [`object_store_suite!`](crate::object_store_suite) expands to one
//! `#[tokio::test]` per function of `object_store::integration` that a
//! fenced store can run; [`NOT_RUN`] names the others and why. The crate
//! README's table is checked against both, and both against
//! object_store's source, by this crate's tests.

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
/// so give each a fresh bucket or prefix). Also defines `RUN`, the names.
#[macro_export]
macro_rules! object_store_suite {
    ($store:path) => {
        $crate::object_store_suite! { @cases $store;
            put_get_delete_list(s) => ::object_store::integration::put_get_delete_list(&*s).await;
            put_get_attributes(s) => ::object_store::integration::put_get_attributes(&*s).await;
            get_opts(s) => ::object_store::integration::get_opts(&*s).await;
            put_opts(s) => ::object_store::integration::put_opts(&*s, true).await;
            stream_get(s) => ::object_store::integration::stream_get(&*s).await;
            list_uses_directories_correctly(s) =>
                ::object_store::integration::list_uses_directories_correctly(&*s).await;
            list_with_delimiter(s) => ::object_store::integration::list_with_delimiter(&*s).await;
            get_nonexistent_object(s) => {
                let err = ::object_store::integration::get_nonexistent_object(&*s, None)
                    .await
                    .unwrap_err();
                assert!(matches!(err, ::object_store::Error::NotFound { .. }), "{err}");
            };
            rename_and_copy(s) => ::object_store::integration::rename_and_copy(&*s).await;
            copy_if_not_exists(s) => ::object_store::integration::copy_if_not_exists(&*s).await;
            copy_rename_nonexistent_object(s) =>
                ::object_store::integration::copy_rename_nonexistent_object(&*s).await;
            multipart_race_condition(s) =>
                ::object_store::integration::multipart_race_condition(&*s, true).await;
            multipart_out_of_order(s) =>
                ::object_store::integration::multipart_out_of_order(&*s).await;
            list_with_offset_exclusivity(s) =>
                ::object_store::integration::list_with_offset_exclusivity(&*s).await;
        }
    };
    (@cases $store:path; $($name:ident($s:ident) => $body:expr;)*) => {
        /// The conformance functions this suite runs.
        #[allow(dead_code)]
        pub const RUN: &[&str] = &[$(stringify!($name)),*];
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some($s) = $store().await else { return };
                let $s: ::std::sync::Arc<dyn ::object_store::ObjectStore> = $s;
                $body;
            }
        )*
    };
}
