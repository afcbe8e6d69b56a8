//! DynamoDB's clock, as the `Date` of its answers tells it: where a lease
//! item that does not exist starts its counter.

use std::sync::Arc;
use std::time::SystemTime;

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

/// The server's time in microseconds since the epoch, `None` before the
/// first answer. `Date` counts whole seconds and the estimate adds this
/// process's monotonic time since, so it trails the server's time by less
/// than a second (plus the local clock's drift): a counter deleted and
/// made again within a second of its first grant can still start below
/// the old one's tokens.
pub(crate) fn micros(clock: &ServerClock) -> Option<u64> {
    let since = clock.now()?.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some(u64::try_from(since.as_micros()).unwrap_or(u64::MAX / 2))
}
