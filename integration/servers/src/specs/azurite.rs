//! Azurite, the Azure Blob emulator.

use super::{NODEJS, NPM};
use crate::util::curl;
use crate::{Container, Dep, Group, Instance, Launch, Member, NpmTools, Server, Service, Stop};

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
    about: "Azurite blob, in memory; account `devstoreaccount1` with Azurite's well-known key",
    group: Group::Standard,
    members: MEMBERS,
    servers: &[AZURE],
    deps: &[NODEJS, NPM, Dep::Npm(&AZURITE_NPM)],
    start,
    probe,
    setup: None,
    cluster: None,
    stop: Stop::TermTwice,
    compose,
};

/// Starts Azurite's Blob service on `instance.ip:instance.port`. In memory:
/// nothing to clean up between runs (Azurite refuses `--location` with
/// `--inMemoryPersistence`).
fn start(instance: &Instance) -> Result<Launch, String> {
    let bin = super::npm_bin(instance, &AZURITE_NPM, "azurite-blob", "azurite")?;
    Ok(Launch::new(
        bin,
        [
            "--blobHost".to_owned(),
            instance.ip.to_string(),
            "--blobPort".to_owned(),
            instance.port.to_string(),
            "--inMemoryPersistence".to_owned(),
            "--loose".to_owned(),
            "--skipApiVersionCheck".to_owned(),
        ],
        &instance.dir,
    ))
}

/// Lists the development account's containers, unsigned: Azurite refuses
/// it, but names itself in its `Server` header.
fn probe(instance: &Instance) -> bool {
    let url = format!(
        "http://{}:{}/devstoreaccount1?comp=list",
        instance.ip, instance.port
    );
    curl(&["-o", "/dev/null", "-D", "-", &url])
        .is_some_and(|headers| headers.to_lowercase().contains("server: azurite"))
}

// Microsoft's image of the same Azurite release, in memory like the native
// one; it listens on every address of the container, on the native port.
fn compose(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| Container {
            name: m.instance.to_owned(),
            image: "mcr.microsoft.com/azure-storage/azurite:3.37.0".to_owned(),
            command: vec![
                "azurite-blob".to_owned(),
                "--blobHost=0.0.0.0".to_owned(),
                format!("--blobPort={}", m.port),
                "--inMemoryPersistence".to_owned(),
                "--loose".to_owned(),
                "--skipApiVersionCheck".to_owned(),
            ],
            ports: vec![(m.port, m.port)],
            // (node is in the image, whatever else its base has)
            healthcheck: Some(node_port_check(m.port)),
            ..Container::default()
        })
        .collect()
}

/// A shell command that exits 0 when `port` of the container accepts a
/// connection, for the Node.js images (node is sure to be there).
pub(crate) fn node_port_check(port: u16) -> String {
    format!(
        "node -e \"require('net').connect({port}, '127.0.0.1').on('connect', () => process.exit(0)).on('error', () => process.exit(1))\""
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Private;
    use crate::private::standard::probe_standard;

    #[test]
    fn the_version_is_the_one_npm_installs() {
        let image = &compose(&SINGLE)[0].image;
        let version = AZURITE_NPM.packages.trim_start_matches("azurite@");
        assert!(image.ends_with(&format!(":{version}")), "{image}");
    }

    #[test]
    fn azurite_starts_on_a_free_port_and_answers() {
        let _server = Private::start(&SINGLE, &[]).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_standard_server_answers() {
        probe_standard(&[&SINGLE]);
    }
}
