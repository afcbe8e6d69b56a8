//! What more than one test file needs.

use fencing_harness::env::ZOOKEEPER;
use fencing_harness::proxy::HoldingProxy;

/// A proxy in front of the first ZooKeeper server, whose bytes a test can
/// hold on the way (a request sent, its answer never coming).
pub(crate) async fn holding_proxy() -> HoldingProxy {
    let target = ZOOKEEPER
        .endpoint()
        .split(',')
        .next()
        .expect("a server")
        .trim()
        .to_owned();
    let target: std::net::SocketAddr = target
        .parse()
        .unwrap_or_else(|_| panic!("{target}: expected IP:PORT"));
    HoldingProxy::start(target).await
}
