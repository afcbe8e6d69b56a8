//! DynamoDB's clock, as the `Date` of its answers tells it: where a lease
//! item that does not exist starts its counter.

use std::sync::Arc;
use std::time::SystemTime;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::interceptors::BeforeDeserializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::primitives::{DateTime, DateTimeFormat};
use fencing_core::adapter::blob::ServerClock;

/// Feeds the `Date` of every answer (refusals and errors included: the
/// outputs do not expose it) to a [`ServerClock`].
#[derive(Clone, Debug)]
struct ObserveDate(Arc<ServerClock>);

impl Intercept for ObserveDate {
    fn name(&self) -> &'static str {
        "fencing-dynamodb ObserveDate"
    }

    fn read_after_transmit(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // An unreadable Date only costs the estimate; never fail the call.
        let date = context.response().headers().get("date");
        if let Some(date) = date.and_then(|d| DateTime::from_str(d, DateTimeFormat::HttpDate).ok())
            && let Ok(date) = SystemTime::try_from(date)
        {
            self.0.observe(date);
        }
        Ok(())
    }
}

/// `client` with every answer's `Date` fed to `clock`.
pub(crate) fn observing(client: Client, clock: &Arc<ServerClock>) -> Client {
    let config = client
        .config()
        .to_builder()
        .interceptor(ObserveDate(Arc::clone(clock)))
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
