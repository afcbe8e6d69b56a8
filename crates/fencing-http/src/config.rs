//! The configuration a [`FencingLayer`](crate::FencingLayer) builds and its
//! services read: its own module, so that the layer, the service and request
//! reading depend on it rather than on each other.

use std::fmt;
use std::sync::Arc;

use fencing_core::FencedStore;
use http::request::Parts;
use http::{HeaderName, Method};

use crate::gate::Gate;

type ResourceFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;
type Predicate = dyn Fn(&Parts) -> bool + Send + Sync;

/// Where a request's resource comes from.
#[derive(Clone)]
pub(crate) enum ResourceSource {
    /// A header (default `Fencing-Resource`).
    Header(HeaderName),
    /// One resource for every fenced request.
    Fixed(String),
    /// A function of the request (its path, a route parameter, an extension).
    Extractor(Arc<ResourceFn>),
}

/// Which requests are fenced.
#[derive(Clone)]
pub(crate) enum Selector {
    Methods(Vec<Method>),
    Predicate(Arc<Predicate>),
}

/// Everything a [`FencingService`](crate::FencingService) needs; one per
/// layer.
pub(crate) struct Config {
    pub(crate) store: Arc<dyn FencedStore>,
    pub(crate) token_header: HeaderName,
    pub(crate) resource: ResourceSource,
    pub(crate) key_prefix: String,
    pub(crate) selector: Selector,
    pub(crate) gate: Option<Arc<Gate>>,
}

impl Config {
    pub(crate) fn is_fenced(&self, parts: &Parts) -> bool {
        match &self.selector {
            Selector::Methods(methods) => methods.contains(&parts.method),
            Selector::Predicate(predicate) => predicate(parts),
        }
    }
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let resource = match &self.resource {
            ResourceSource::Header(name) => format!("header {name}"),
            ResourceSource::Fixed(resource) => format!("fixed {resource:?}"),
            ResourceSource::Extractor(_) => "extractor".to_owned(),
        };
        let selector = match &self.selector {
            Selector::Methods(methods) => format!("{methods:?}"),
            Selector::Predicate(_) => "predicate".to_owned(),
        };
        f.debug_struct("FencingLayer")
            .field("store", &self.store.name())
            .field("token_header", &self.token_header)
            .field("resource", &resource)
            .field("key_prefix", &self.key_prefix)
            .field("fenced", &selector)
            .field("gate", &self.gate)
            .finish()
    }
}
