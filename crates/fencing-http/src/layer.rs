//! [`FencingLayer`]: builds the configuration shared by every service it
//! wraps.

use std::sync::Arc;
use std::time::Duration;

use fencing_core::FencedStore;
use http::request::Parts;
use http::{HeaderName, Method};
use tower::Layer;

use crate::config::{Config, ResourceSource, Selector};
use crate::gate::Gate;
use crate::service::FencingService;
use crate::{RESOURCE_HEADER, TOKEN_HEADER};

/// A [`tower::Layer`] that makes a service refuse requests carrying a stale
/// fencing token.
///
/// For every fenced request (by default `POST`, `PUT`, `PATCH`, `DELETE`)
/// it reads the resource and the token (headers `Fencing-Resource` and
/// `Fencing-Token` by default), calls
/// [`store.fence(key, token)`](FencedStore::fence) (the key is the resource,
/// after an optional prefix), and only if the store accepts calls the inner
/// service, with an [`Admission`](crate::Admission) in the request's
/// extensions. Otherwise it answers itself (see [`problem`](crate::problem)):
/// 409 for a stale token, 428 for a missing one, 400 for a malformed or
/// out-of-range one, 503 or 500 for a store failure.
///
/// Cloning is cheap; every service made by one layer (and its clones) shares
/// one configuration and one [gate](Self::with_gate).
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use fencing_core::memory::MemoryStore;
/// use fencing_http::FencingLayer;
/// use http::Method;
///
/// let store = Arc::new(MemoryStore::new());
/// let layer = FencingLayer::new(store)
///     .with_key_prefix("http/")
///     .with_methods([Method::POST, Method::PUT])
///     .with_gate(std::time::Duration::from_secs(10));
/// # let _ = layer;
/// ```
#[derive(Clone, Debug)]
pub struct FencingLayer {
    config: Arc<Config>,
}

impl FencingLayer {
    /// A layer checking tokens against `store`, with the defaults: headers
    /// `Fencing-Token` and `Fencing-Resource`, the resource as the key,
    /// `POST`/`PUT`/`PATCH`/`DELETE` fenced, no in-process gate.
    pub fn new(store: Arc<dyn FencedStore>) -> Self {
        Self {
            config: Arc::new(Config {
                store,
                token_header: HeaderName::from_static(TOKEN_HEADER),
                resource: ResourceSource::Header(HeaderName::from_static(RESOURCE_HEADER)),
                key_prefix: String::new(),
                selector: Selector::Methods(vec![
                    Method::POST,
                    Method::PUT,
                    Method::PATCH,
                    Method::DELETE,
                ]),
                gate: None,
            }),
        }
    }

    fn with(self, change: impl FnOnce(&mut Config)) -> Self {
        let mut config = match Arc::try_unwrap(self.config) {
            Ok(config) => config,
            Err(shared) => Config {
                store: shared.store.clone(),
                token_header: shared.token_header.clone(),
                resource: shared.resource.clone(),
                key_prefix: shared.key_prefix.clone(),
                selector: shared.selector.clone(),
                gate: shared.gate.clone(),
            },
        };
        change(&mut config);
        Self {
            config: Arc::new(config),
        }
    }

    /// The header carrying the token (default `Fencing-Token`).
    pub fn with_token_header(self, name: HeaderName) -> Self {
        self.with(|c| c.token_header = name)
    }

    /// The header carrying the resource (default `Fencing-Resource`).
    pub fn with_resource_header(self, name: HeaderName) -> Self {
        self.with(|c| c.resource = ResourceSource::Header(name))
    }

    /// Every fenced request is for this one resource (the service guards one
    /// thing; clients send only the token).
    pub fn with_resource(self, resource: impl Into<String>) -> Self {
        let resource = resource.into();
        self.with(|c| c.resource = ResourceSource::Fixed(resource))
    }

    /// The resource comes from the request itself, e.g. its path
    /// (`|parts| Some(parts.uri.path().to_owned())`). `None` is answered
    /// `428` (missing resource), never let through.
    pub fn with_resource_from<F>(self, extract: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        self.with(|c| c.resource = ResourceSource::Extractor(Arc::new(extract)))
    }

    /// The store key is `prefix` followed by the resource (default: no
    /// prefix). A client that fences on acquire must use the same key.
    pub fn with_key_prefix(self, prefix: impl Into<String>) -> Self {
        let prefix = prefix.into();
        self.with(|c| c.key_prefix = prefix)
    }

    /// Fence requests with these methods (and pass every other through).
    pub fn with_methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods = methods.into_iter().collect();
        self.with(|c| c.selector = Selector::Methods(methods))
    }

    /// Fence exactly the requests for which `predicate` is true (replaces
    /// the method list), e.g. by path.
    pub fn with_predicate<F>(self, predicate: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.with(|c| c.selector = Selector::Predicate(Arc::new(predicate)))
    }

    /// Turns on the in-process gate: per resource, a request's check waits
    /// (at most `max_wait`, then `503`) until every lower-token request this
    /// layer has already admitted has finished, and a higher token waiting
    /// goes before lower ones. So on this instance a request admitted with
    /// token 7 has finished (its inner service's future has completed)
    /// before token 8 is admitted. It orders nothing across instances: see
    /// the crate docs.
    pub fn with_gate(self, max_wait: Duration) -> Self {
        self.with(|c| c.gate = Some(Arc::new(Gate::new(max_wait))))
    }
}

impl<S> Layer<S> for FencingLayer {
    type Service = FencingService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencingService::new(inner, self.config.clone())
    }
}
