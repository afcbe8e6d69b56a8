//! What the core's test binaries share.

use std::sync::Arc;

use bytes::Bytes;
use fencing_core::{FencedStore, FencingToken};

/// 16 writers × 10 puts of `"k"`, all at token 1, so only the backend's
/// precondition keeps them apart. Panics if a put fails.
pub(crate) async fn sixteen_writers_at_one_token<S: FencedStore + 'static>(store: Arc<S>) {
    let mut tasks = Vec::new();
    for w in 0..16u8 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..10u8 {
                store
                    .put("k", Bytes::from(vec![w, i]), FencingToken::new(1))
                    .await
                    .expect("equal tokens never go stale");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}
