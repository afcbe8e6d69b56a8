//! [`ObserveDate`]: the `Date` of each answer an AWS SDK client receives,
//! for a [`ServerClock`] and for the one call that asked.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use aws_smithy_types::date_time::{DateTime, Format};
use fencing_core::adapter::blob::ServerClock;

/// An interceptor that feeds the `Date` of each HTTP answer (404s, 412s,
/// refusals and retried attempts included: the outputs and errors do not
/// expose it) to a [`ServerClock`], and keeps the latest for its caller.
///
/// On a client it sees every call; given to one call
/// (`.customize().interceptor(…)`), a clone of it tells the `Date` of the
/// answer that call returned ([`answered`](Self::answered)): an attempt's
/// answer arrives after the earlier attempts'.
#[derive(Clone, Debug)]
pub struct ObserveDate {
    clock: Arc<ServerClock>,
    answered: Arc<Mutex<Option<SystemTime>>>,
}

impl ObserveDate {
    /// An interceptor feeding `clock`.
    pub fn new(clock: &Arc<ServerClock>) -> Self {
        Self {
            clock: Arc::clone(clock),
            answered: Arc::default(),
        }
    }

    /// The `Date` of the latest answer seen, if it had a readable one.
    pub fn answered(&self) -> Option<SystemTime> {
        *self.answered.lock().expect("answered lock")
    }
}

impl Intercept for ObserveDate {
    fn name(&self) -> &'static str {
        "fencing-aws ObserveDate"
    }

    fn read_after_transmit(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // An unreadable Date only costs the estimate; never fail the call.
        let date = context.response().headers().get("date");
        if let Some(date) = date.and_then(|d| DateTime::from_str(d, Format::HttpDate).ok())
            && let Ok(date) = SystemTime::try_from(date)
        {
            self.clock.observe(date);
            *self.answered.lock().expect("answered lock") = Some(date);
        }
        Ok(())
    }
}
