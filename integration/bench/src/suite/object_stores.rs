//! The object-store cases (S3, GCS, Azure Blob, …): fenced puts against
//! plain ones.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use fencing_integration::backends::Backend;
use fencing_integration::backends::plain::blob::BlobPlain;
use fencing_integration::object_stores::Cloud;
use fencing_object_store::FencedObjectStore;
use fencing_tokens::FencingToken;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use super::{Output, Plan, counting, payload, prefix, reach, server_of, target};
use crate::BoxResult;
use crate::blob;
use crate::contention;
use crate::measure::{Row, compare};

/// The object-store cases on `backend`, whose backend on this run's bucket
/// at an endpoint `plain.open` opens (the adapter's `emulator::store`).
pub(super) async fn run(
    backend: &'static Backend,
    plain: BlobPlain,
    plan: &Plan,
    out: &mut Output,
) -> BoxResult<()> {
    let (name, server) = (backend.name, server_of(backend)?);
    let (endpoint, bucket) = (server.endpoint(), bucket());
    let open = async |endpoint: &str| {
        reach(
            server,
            (plain.open)(endpoint.to_owned(), bucket.clone())
                .await
                .map_err(Into::into),
        )
    };
    let direct = blob::Sides::new(open(&endpoint).await?);
    let counted = counting(plan, &endpoint, async |via| {
        Ok(blob::Sides::new(open(&via).await?))
    })
    .await?;
    let through_proxy = counted.as_ref().map(|(proxy, sides)| (proxy, sides));

    for &len in &plan.payloads {
        let value = payload(len);
        for cold in [false, true] {
            let kind = if cold { "cold" } else { "warm" };
            let (fk, pk) = (
                format!("fenced-{kind}-{len}"),
                format!("plain-{kind}-{len}"),
            );
            let fenced = async |sides: &blob::Sides| {
                if cold {
                    sides.cold_put(&fk, value.clone(), 1).await
                } else {
                    sides.warm_put(&fk, value.clone(), 1).await
                }
            };
            let (timed, trips) = compare(
                (plan.object_iterations, plan.warmup.max(1)),
                plan.count_ops,
                &direct,
                through_proxy,
                fenced,
                async |s: &blob::Sides| s.plain_put(&pk, value.clone()).await,
            )
            .await?;
            let (operation, target) = if cold {
                ("put, cold (read + conditional put)", target::BLOB_COLD)
            } else {
                ("put, warm (conditional put)", target::BLOB_WARM)
            };
            let note = if cold {
                "a fresh `BlobStore` per write reads version and token first; plain: an unconditional put, same client"
            } else {
                "the store that wrote last has the version cached; plain: an unconditional put, same client"
            };
            out.rows.push(
                Row::latency(name, operation, Some(len), timed, Some(target))
                    .with_trips(trips)
                    .note(note),
            );
        }
    }

    // What the cold path adds: the read, against a plain put.
    let len = plan.payloads[0];
    let value = payload(len);
    let (rk, pk) = (format!("fenced-cold-{len}"), format!("plain-read-{len}"));
    let (timed, trips) = compare(
        (plan.object_iterations, plan.warmup),
        plan.count_ops,
        &direct,
        through_proxy,
        async |s: &blob::Sides| s.read_version(&rk).await,
        async |s: &blob::Sides| s.plain_put(&pk, value.clone()).await,
    )
    .await?;
    out.rows.push(
        Row::latency(name, "the cold read alone vs a put", Some(len), timed, None)
            .with_trips(trips)
            .note("what a cold put adds to a warm one"),
    );

    // The bucket lease: warm (the issuer that released last) and cold (a
    // fresh issuer), against the two bare conditional writes.
    for cold in [false, true] {
        let (timed, trips) = compare(
            (plan.object_iterations, plan.warmup.max(1)),
            plan.count_ops,
            &direct,
            through_proxy,
            async |s: &blob::Sides| {
                if cold {
                    s.cold_lease("lease-cold").await
                } else {
                    s.warm_lease("lease-warm").await
                }
            },
            async |s: &blob::Sides| s.raw_lease("raw-lease").await,
        )
        .await?;
        let row = if cold {
            Row::latency(name, "bucket lease, cold: acquire + release vs 2 conditional puts", None, timed, None)
                .note("a fresh `BlobIssuer` per lease (a new process) reads the record first: 1 GET + 2 PUTs")
        } else {
            Row::latency(name, "bucket lease: acquire + release vs 2 conditional puts", None, timed, Some(target::LOCK))
                .note("the issuer that released last knows the record's version: 2 conditional PUTs; raw: a create-only put and a put on its version, a new object each time")
        };
        out.rows.push(row.with_trips(trips));
    }

    if let Some(cloud) = Cloud::ALL
        .into_iter()
        .find(|c| c.name() == name && *c != Cloud::Gcs)
    {
        object_store_rows(name, cloud, plan, out).await?;
    }

    let writers = plan.object_load.writers;
    let requests = Arc::new(AtomicU64::new(0));
    let fenced = direct.fenced_writers(writers, "contended-fenced", &value, &requests);
    let plain = direct.plain_writers(writers, "contended-plain", &value);
    out.rows.push(
        contention::run(
            name,
            len,
            plan.object_load,
            &fenced,
            &plain,
            Some(&requests),
        )
        .await?,
    );
    Ok(())
}

/// `fencing-object-store`'s `FencedObjectStore` over object_store's own
/// client for `cloud` (an engine's store) against that client's plain put,
/// on this run's bucket: warm, the store that wrote last has the version.
/// Not on GCS: fake-gcs-server serves no XML API put, which object_store's
/// GCS client writes with.
async fn object_store_rows(
    name: &'static str,
    cloud: Cloud,
    plan: &Plan,
    out: &mut Output,
) -> BoxResult<()> {
    let (endpoint, bucket) = (cloud.server().endpoint(), bucket());
    let direct = EngineSides::open(cloud, &endpoint, &bucket)?;
    let counted = counting(plan, &endpoint, async |via| {
        EngineSides::open(cloud, &via, &bucket)
    })
    .await?;
    let through_proxy = counted.as_ref().map(|(proxy, sides)| (proxy, sides));
    for &len in &plan.payloads {
        let value = payload(len);
        let (fk, pk) = (
            Path::from(format!("engine-fenced-{len}")),
            Path::from(format!("engine-plain-{len}")),
        );
        let (timed, trips) = compare(
            (plan.object_iterations, plan.warmup.max(1)),
            plan.count_ops,
            &direct,
            through_proxy,
            async |s: &EngineSides| {
                Ok(s.fenced.put(&fk, value.clone().into()).await.map(|_| ())?)
            },
            async |s: &EngineSides| Ok(s.plain.put(&pk, value.clone().into()).await.map(|_| ())?),
        )
        .await?;
        out.rows.push(
            Row::latency(
                name,
                "object_store: FencedObjectStore put, warm",
                Some(len),
                timed,
                Some(target::BLOB_WARM),
            )
            .with_trips(trips)
            .note("object_store's own client, wrapped; plain: the same client's put"),
        );
    }
    Ok(())
}

/// object_store's client on the bucket, plain and fenced.
#[derive(Debug)]
struct EngineSides {
    plain: Arc<dyn ObjectStore>,
    fenced: FencedObjectStore<Arc<dyn ObjectStore>>,
}

impl EngineSides {
    fn open(cloud: Cloud, endpoint: &str, bucket: &str) -> BoxResult<Self> {
        let plain = cloud.client(endpoint, bucket)?;
        let fenced = FencedObjectStore::new(plain.clone(), FencingToken::new(1));
        Ok(Self { plain, fenced })
    }
}

/// Bucket or container of this run.
pub(crate) fn bucket() -> String {
    prefix().replace('_', "-")
}
