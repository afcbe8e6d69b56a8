//! DynamoDB's clock, as the `Date` of its answers tells it: where a lease
//! item that does not exist starts its counter.

use std::sync::Arc;

use aws_sdk_dynamodb::Client;
use fencing_aws::ObserveDate;
use fencing_core::adapter::blob::ServerClock;

/// `client` with every answer's `Date` fed to `clock`.
pub(crate) fn observing(client: Client, clock: &Arc<ServerClock>) -> Client {
    let config = client
        .config()
        .to_builder()
        .interceptor(ObserveDate::new(clock))
        .build();
    Client::from_conf(config)
}
