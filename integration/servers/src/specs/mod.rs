//! One module per server family; each declares its [`Service`]s, their
//! members and [`Server`]s, and how they start, answer, are set up and
//! appear in `docker-compose.yml`.
//!
//! [`Service`]: crate::Service
//! [`Server`]: crate::Server

pub mod azurite;
pub mod etcd;
pub mod gcs;
pub mod mariadb;
pub mod moto;
pub mod pki;
pub mod postgres;
pub mod redis;
pub mod s3rver;
pub mod zookeeper;

use crate::{Container, Instance, Launch, Service};

/// The placeholder of a part not ported from the bash yet.
pub(crate) fn unported_start(i: &Instance) -> Result<Launch, String> {
    Err(format!("{}: start is not ported yet", i.name))
}
/// The placeholder of a part not ported from the bash yet.
pub(crate) fn unported_probe(_: &Instance) -> bool {
    false
}
/// The placeholder of a part not ported from the bash yet.
pub(crate) fn unported_compose(_: &Service) -> Vec<Container> {
    Vec::new()
}
