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
