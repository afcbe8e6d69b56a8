//! A real process pause: a separate OS process acquires a lease and is
//! about to write; the test stops it with SIGSTOP past its TTL, takes the
//! lease and writes, then SIGCONTs it. Its write must be refused with the
//! typed error, and the store must hold the new holder's data.

use std::process::Command;
use std::time::Duration;

use fencing_harness::process::{Signal, signal, spawn_reporting_token};
use fencing_integration::{RUN_PREFIX_VAR, issuer, run_prefix, store};
use fencing_tokens::LeaseRequest;

async fn paused_process_is_refused(issuer_name: &str, store_name: &str) {
    let (Some((issuer, ttl)), Some(store)) = (issuer(issuer_name).await, store(store_name).await)
    else {
        return;
    };
    let resource = fencing_testkit::unique_name("paused");
    let key = fencing_testkit::unique_name("paused-key");

    let (mut child, mut lines, zombie_token) = spawn_reporting_token(
        Command::new(env!("CARGO_BIN_EXE_zombie-client"))
            .args([issuer_name, store_name, &resource, &key])
            .env(RUN_PREFIX_VAR, run_prefix()),
        "acquired",
    );

    signal(child.id(), Signal::SIGSTOP);
    tokio::time::sleep(ttl + ttl / 2).await;

    let lease = issuer
        .acquire(
            &LeaseRequest::new(&resource, ttl * 10),
            ttl * 10 + Duration::from_secs(10),
        )
        .await
        .expect("the lease passes on while the first process is stopped");
    assert!(lease.token().get() > zombie_token);
    store
        .put(&key, "written by the new holder".into(), lease.token())
        .await
        .expect("new holder writes");

    signal(child.id(), Signal::SIGCONT);
    let verdict = lines.next().expect("a verdict").expect("readable");
    let status = child.wait().unwrap();
    assert_eq!(
        verdict,
        format!("refused {zombie_token} {}", lease.token()),
        "{issuer_name} × {store_name}: the resumed process's write must be refused"
    );
    assert_eq!(status.code(), Some(3));
    let stored = store.get(&key).await.unwrap().expect("value");
    assert_eq!(stored.value, "written by the new holder");
    assert_eq!(stored.token, lease.token());
    issuer.release(&lease).await.unwrap();
}

macro_rules! pause_pairs {
    ($($name:ident: $issuer:literal, $store:literal),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                paused_process_is_refused($issuer, $store).await;
            }
        )+
    };
}

pause_pairs! {
    etcd_x_postgres: "etcd", "postgres",
    redis_x_s3: "redis", "s3",
    postgres_x_s3: "postgres", "s3",
    mariadb_x_sqlite: "mariadb", "sqlite",
    zookeeper_x_gcs: "zookeeper", "gcs",
    sqlite_x_azure: "sqlite", "azure",
    // The issuers that need nothing but a bucket or a table, against their
    // own: the simplest deployment.
    s3_x_s3: "s3", "s3",
    gcs_x_gcs: "gcs", "gcs",
    azure_x_azure: "azure", "azure",
    dynamodb_x_dynamodb: "dynamodb", "dynamodb",
}
