//! Leader failover on the 3-member etcd cluster
//! (`FENCING_ETCD_CLUSTER_ENDPOINTS`, default ports 11379/12379/13379;
//! start it with `integration/services.sh up etcd-cluster`), through the
//! testkit's harness ([`fencing_harness::failover`]): tokens strictly
//! increasing in grant order and no stale write accepted while the leader
//! is killed and restarted.

use std::time::Duration;

use fencing_etcd::EtcdConfig;
use fencing_harness::env::ETCD_CLUSTER;
use fencing_harness::failover::{Cluster, FailoverConfig, leader_kill};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_kill_keeps_tokens_increasing_and_refuses_stale_writes() {
    let config = FailoverConfig::with_ttl(Duration::from_secs(3));
    leader_kill(
        &Cluster::new(ETCD_CLUSTER),
        &config,
        |endpoints| async move {
            let endpoints: Vec<&str> = endpoints.split(',').map(str::trim).collect();
            EtcdConfig::new(endpoints)
                .with_prefix(format!("{}/", fencing_testkit::unique_prefix()))
                .with_operation_timeout(Duration::from_secs(3))
                .connect_issuer()
                .await
        },
    )
    .await;
}
