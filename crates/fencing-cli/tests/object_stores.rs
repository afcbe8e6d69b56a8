//! `fence put/get/fence/mark` on the object-store emulators by URL, with the
//! real binary: the stale-token error exactly as a program sees it.

use std::process::{Command, Output};

use fencing_harness::env::{AZURE, GCS, S3, Server};

const FENCE: &str = env!("CARGO_BIN_EXE_fence");

fn fence(args: &[&str]) -> Output {
    Command::new(FENCE).args(args).output().expect("run fence")
}

fn bucket() -> String {
    fencing_testkit::unique_prefix()
}

fn round_trip(server: &Server, url: &str) {
    let ok = fence(&[
        "put",
        "--store",
        url,
        "report",
        "--token",
        "34",
        "from the holder",
    ]);
    assert!(
        ok.status.success(),
        "{}: {}",
        server.name,
        String::from_utf8_lossy(&ok.stderr)
    );
    let stale = fence(&[
        "put",
        "--store",
        url,
        "report",
        "--token",
        "33",
        "from the zombie",
    ]);
    assert_eq!(
        stale.status.code(),
        Some(3),
        "{}: {}",
        server.name,
        String::from_utf8_lossy(&stale.stderr)
    );
    assert!(
        String::from_utf8_lossy(&stale.stderr)
            .contains("presented 33, but the store has already accepted 34")
    );
    let got = fence(&["get", "--store", url, "report", "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(
        (got["value"].as_str(), got["token"].as_u64()),
        (Some("from the holder"), Some(34)),
        "{}",
        server.name
    );
    assert!(
        fence(&["fence", "--store", url, "report", "--token", "40"])
            .status
            .success()
    );
    let mark = fence(&["mark", "--store", url, "report", "--json"]);
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&mark.stdout).unwrap()["mark"],
        40,
        "{}",
        server.name
    );
}

#[tokio::test]
async fn s3_by_url() {
    if S3.skipped() {
        return;
    }
    let (endpoint, bucket) = (S3.endpoint(), bucket());
    let client = fencing_s3::emulator::client(&endpoint);
    if let Err(e) = fencing_s3::emulator::create_bucket(&client, &bucket).await {
        S3.unavailable(&e);
    }
    round_trip(
        &S3,
        &format!("s3://{bucket}?endpoint={endpoint}&emulator=true"),
    );
}

#[tokio::test]
async fn gcs_by_url() {
    if GCS.skipped() {
        return;
    }
    let (endpoint, bucket) = (GCS.endpoint(), bucket());
    if let Err(e) = fencing_gcs::emulator::create_bucket(&endpoint, &bucket).await {
        GCS.unavailable(&e);
    }
    round_trip(
        &GCS,
        &format!("gs://{bucket}?endpoint={endpoint}&emulator=true"),
    );
}

#[tokio::test]
async fn azure_by_url() {
    if AZURE.skipped() {
        return;
    }
    let (endpoint, container) = (AZURE.endpoint(), bucket());
    if let Err(e) = fencing_azure::emulator::store(&endpoint, &container).await {
        AZURE.unavailable(&e);
    }
    round_trip(
        &AZURE,
        &format!("az://{container}?endpoint={endpoint}&emulator=true"),
    );
}

/// An object written by a program that knows nothing of fencing (here the
/// SDK, no frame) is refused by `fence put`, nothing written, with a message
/// naming the URL option; with `adopt_unfenced=true` it is taken over at
/// mark 0, and from then on it is fenced like any other.
#[tokio::test]
async fn foreign_object_is_refused_unless_the_url_adopts_it() {
    if S3.skipped() {
        return;
    }
    let (endpoint, bucket) = (S3.endpoint(), bucket());
    let client = fencing_s3::emulator::client(&endpoint);
    if let Err(e) = fencing_s3::emulator::create_bucket(&client, &bucket).await {
        S3.unavailable(&e);
    }
    client
        .put_object()
        .bucket(&bucket)
        .key("legacy")
        .body(aws_sdk_s3::primitives::ByteStream::from_static(
            b"written by a legacy job",
        ))
        .send()
        .await
        .expect("plain put_object");
    let url = format!("s3://{bucket}?endpoint={endpoint}&emulator=true");

    let refused = fence(&["put", "--store", &url, "legacy", "--token", "7", "new"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not written through fencing")
            && err.contains("nothing was written")
            && err.contains("?adopt_unfenced=true"),
        "{err}"
    );
    let body = client
        .get_object()
        .bucket(&bucket)
        .key("legacy")
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    assert_eq!(
        &body[..],
        b"written by a legacy job",
        "the refusal wrote nothing"
    );

    // A typo is bad input, not a silent "no".
    let typo = fence(&[
        "put",
        "--store",
        &format!("{url}&adopt_unfenced=ture"),
        "legacy",
        "--token",
        "7",
        "new",
    ]);
    assert_eq!(
        typo.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&typo.stderr)
    );

    let adopting = format!("{url}&adopt_unfenced=true");
    let adopted = fence(&["put", "--store", &adopting, "legacy", "--token", "7", "new"]);
    assert!(
        adopted.status.success(),
        "{}",
        String::from_utf8_lossy(&adopted.stderr)
    );
    // Now framed: the plain URL reads it, and a lower token is refused.
    let got = fence(&["get", "--store", &url, "legacy", "--json"]);
    let got: serde_json::Value = serde_json::from_slice(&got.stdout).unwrap();
    assert_eq!(
        (got["value"].as_str(), got["token"].as_u64()),
        (Some("new"), Some(7))
    );
    let stale = fence(&["put", "--store", &url, "legacy", "--token", "6", "zombie"]);
    assert_eq!(
        stale.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&stale.stderr)
    );
}
