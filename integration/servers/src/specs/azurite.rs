//! Azurite, the Azure Blob emulator.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, NpmTools, Server, Service, Stop};

/// Azurite's npm prefix.
pub const AZURITE_NPM: NpmTools = NpmTools {
    prefix: "node",
    packages: "azurite@3.37.0",
};

const MEMBERS: &[Member] = &[Member {
    instance: "azurite",
    port: 10000,
    peer_ports: &[],
}];

/// The Azure Blob emulator (Azurite).
pub const AZURE: Server = Server {
    name: "Azure Blob (Azurite)",
    service: "azurite",
    var: "FENCING_AZURE_ENDPOINT",
    form: "http://127.0.0.1:{port}/devstoreaccount1",
    members: MEMBERS,
};

/// `azurite`.
pub const SINGLE: Service = Service {
    name: "azurite",
    about: "Azurite (Azure Blob), in memory",
    group: Group::Standard,
    members: MEMBERS,
    servers: &[AZURE],
    deps: &[
        Dep::Apt {
            package: "nodejs",
            unless: &[Have::Command("node")],
        },
        Dep::Apt {
            package: "npm",
            unless: &[Have::Command("npm")],
        },
        Dep::Npm(&AZURITE_NPM),
    ],
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::TermTwice,
    compose: unported_compose,
};
