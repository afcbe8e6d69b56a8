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
    stop: Stop::Term,
    compose: unported_compose,
};
