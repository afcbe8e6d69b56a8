//! The throwaway PKI of the TLS variants: a CA, a server certificate for
//! localhost and 127.0.0.1, a client certificate (CN=fencing) and a second,
//! unrelated CA. No process: `up pki` only makes the files.

mod make;

use super::OPENSSL;
use crate::{Container, Group, Instance, Launch, Server, Service, Stop};

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
    about: "the TLS variants' throwaway CA and certificates in `.state/tls/` (no process)",
    group: Group::Tls,
    members: &[],
    servers: &[TLS_DIR],
    deps: &[OPENSSL],
    start: no_process,
    probe: never,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: no_containers,
};

// `pki` has no members: its start and probe are never called.
fn no_process(i: &Instance) -> Result<Launch, String> {
    Err(format!("{}: pki runs no process", i.name))
}
fn never(_: &Instance) -> bool {
    false
}
// The compose file's TLS variants mount the PKI `services up pki` makes.
fn no_containers(_: &Service) -> Vec<Container> {
    Vec::new()
}

/// Makes the test PKI under `paths.tls` unless a valid one is there (every
/// file, every certificate valid for another week, the leaves chaining to
/// the CA). `Ok(true)` when it made a new one: a running TLS server still
/// has the old certificates.
pub fn ensure(paths: &crate::Paths) -> Result<bool, String> {
    if !crate::util::have("openssl") {
        return Err(
            "pki: openssl is not installed (run: integration/services.sh deps pki)".to_owned(),
        );
    }
    if make::valid(&paths.tls) {
        return Ok(false);
    }
    eprintln!(
        "services: tls: making a test PKI in {} (CA, server and client certificates, a wrong CA)",
        paths.tls.display()
    );
    make::make(paths)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use crate::private::PrivateState;

    #[test]
    fn ensure_makes_a_pki_once_and_again_when_a_file_is_missing() {
        let state = PrivateState::new("pki").unwrap();
        let paths = state.paths().clone();
        assert!(super::ensure(&paths).unwrap(), "none there: made");
        assert!(!super::ensure(&paths).unwrap(), "a valid one is kept");
        for f in [
            "ca",
            "ca-key",
            "server",
            "server-key",
            "client",
            "client-key",
            "other-ca",
        ] {
            let meta = std::fs::metadata(paths.tls_file(&format!("{f}.pem"))).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o644, "{f}.pem");
        }
        assert!(!paths.tls_file("openssl.cnf").exists());
        std::fs::remove_file(paths.tls_file("client.pem")).unwrap();
        assert!(super::ensure(&paths).unwrap(), "half a PKI: made again");
        assert!(!paths.state.join("tls.new").exists());
        assert!(std::fs::read_to_string(paths.logs.join("pki.log")).is_ok());
    }
}
