//! The throwaway PKI of the TLS variants: a CA, a server certificate for
//! localhost and 127.0.0.1, a client certificate (CN=fencing) and a second,
//! unrelated CA. No process: `up pki` only makes the files.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Server, Service, Stop};

/// The directory of the test PKI.
pub const TLS_DIR: Server = Server {
    name: "the test PKI",
    service: "pki",
    var: "FENCING_TLS_DIR",
    form: "{tls_dir}",
    members: &[],
};

/// `pki`.
pub const PKI: Service = Service {
    name: "pki",
    about: "the TLS variants' throwaway CA and certificates",
    group: Group::Tls,
    members: &[],
    servers: &[TLS_DIR],
    deps: &[Dep::Apt {
        package: "openssl",
        unless: &[Have::Command("openssl")],
    }],
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};

/// Makes the test PKI under `paths.tls` unless a valid one is there (every
/// file, every certificate valid for another week, the leaves chaining to
/// the CA). `Ok(true)` when it made a new one: a running TLS server still
/// has the old certificates.
pub fn ensure(paths: &crate::Paths) -> Result<bool, String> {
    Err(format!("pki: not ported yet ({})", paths.tls.display()))
}
