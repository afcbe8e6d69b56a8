#![doc = include_str!("../README.md")]

// The contract and the recipes; the adapter SPI (`fencing_core::adapter`)
// is for backend crates, which depend on fencing-core themselves.
#[doc(inline)]
pub use fencing_core::{
    BoxError, Error, FencedStore, FencingToken, HolderId, Holding, IssuerExt, Lease, LeaseGuard,
    LeaseRequest, Limits, Lock, Removal, Result, SharedStore, TokenIssuer, Versioned, error_chain,
    redact,
};
#[doc(inline)]
pub use fencing_core::{
    auth, election, instrument, keepalive, lock, memory, safety, scenario, tls,
};

/// The byte buffers values are read and written as (`bytes::Bytes`), so a
/// borrowed `&[u8]` becomes a value without adding the crate:
/// `Bytes::copy_from_slice(data)`.
pub use bytes::{self, Bytes};

pub mod registry;

pub use registry::{open_issuer, open_store};

/// The etcd issuer (feature `etcd`).
#[cfg(feature = "etcd")]
#[doc(inline)]
pub use fencing_etcd as etcd;

/// The ZooKeeper issuer (feature `zookeeper`).
#[cfg(feature = "zookeeper")]
#[doc(inline)]
pub use fencing_zookeeper as zookeeper;

/// The Redis issuer (feature `redis`).
#[cfg(feature = "redis")]
#[doc(inline)]
pub use fencing_redis as redis;

/// SQL stores, the transaction guard and the SQL issuer (features
/// `postgres`, `mysql`, `sqlite`).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[doc(inline)]
pub use fencing_sql as sql;

/// The S3 store and bucket issuer (feature `s3`).
#[cfg(feature = "s3")]
#[doc(inline)]
pub use fencing_s3 as s3;

/// The GCS store and bucket issuer (feature `gcs`).
#[cfg(feature = "gcs")]
#[doc(inline)]
pub use fencing_gcs as gcs;

/// The Azure Blob store and container issuer (feature `azure`).
#[cfg(feature = "azure")]
#[doc(inline)]
pub use fencing_azure as azure;

/// The DynamoDB store and issuer (feature `dynamodb`).
#[cfg(feature = "dynamodb")]
#[doc(inline)]
pub use fencing_dynamodb as dynamodb;
