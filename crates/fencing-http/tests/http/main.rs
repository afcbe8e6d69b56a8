//! fencing-http over real HTTP: an axum service on 127.0.0.1:0 behind the
//! layer, driven by reqwest.

mod bad_headers;
mod common;
mod concurrent;
mod figure_9_6;
mod pass_through;
mod restart;
mod store_failures;
