//! etcd's containers in `docker-compose.yml`.
//!
//! What differs from the native servers: the image is etcd 3.5 (the
//! native one is Debian's 3.4), and it is distroless: no shell, so no
//! `CMD-SHELL` health check (`up --wait` waits for it to run, not to
//! answer). Each container listens on all its addresses, on the member's
//! own ports, and advertises 127.0.0.1 and the published port to clients;
//! the cluster's members reach each other's peer ports by container name.

use crate::{Container, Member, Service, TLS_PASSWORD, TLS_USER};

/// The image of every etcd container.
const IMAGE: &str = "quay.io/coreos/etcd:v3.5.17";
/// The image of etcd-tls's set-up: a shell and Debian's etcdctl, the one
/// the native `services` uses.
const SETUP_IMAGE: &str = "debian:12.11-slim";
/// Where the test PKI is mounted.
const TLS_MOUNT: &str = "./integration/.state/tls:/tls:ro";

fn peer_port(member: &Member) -> u16 {
    member.peer_ports.first().copied().unwrap_or(2380)
}

/// The command of one member: `scheme` on the client port, `peer_host`
/// the name its peers reach it by, `initial` its `--initial-cluster`.
fn command(
    name: &str,
    member: &Member,
    scheme: &str,
    peer_host: &str,
    initial: &str,
) -> Vec<String> {
    let (port, peer) = (member.port, peer_port(member));
    vec![
        "/usr/local/bin/etcd".to_owned(),
        format!("--name={name}"),
        "--data-dir=/etcd-data".to_owned(),
        format!("--listen-client-urls={scheme}://0.0.0.0:{port}"),
        format!("--advertise-client-urls={scheme}://127.0.0.1:{port}"),
        format!("--listen-peer-urls=http://0.0.0.0:{peer}"),
        format!("--initial-advertise-peer-urls=http://{peer_host}:{peer}"),
        format!("--initial-cluster={initial}"),
    ]
}

fn container(member: &Member, command: Vec<String>) -> Container {
    Container {
        name: member.instance.to_owned(),
        image: IMAGE.to_owned(),
        command,
        ports: vec![(member.port, member.port)],
        ..Container::default()
    }
}

/// `etcd`: one member.
pub(super) fn single(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let initial = format!("default=http://127.0.0.1:{}", peer_port(m));
            container(m, command("default", m, "http", "127.0.0.1", &initial))
        })
        .collect()
}

/// `etcd-cluster`: three members that find each other by container name.
pub(super) fn cluster(service: &Service) -> Vec<Container> {
    let initial: Vec<String> = service
        .members
        .iter()
        .enumerate()
        .map(|(n, m)| format!("m{}=http://{}:{}", n + 1, m.instance, peer_port(m)))
        .collect();
    let initial = initial.join(",");
    service
        .members
        .iter()
        .enumerate()
        .map(|(n, m)| {
            let mut command = command(&format!("m{}", n + 1), m, "http", m.instance, &initial);
            command.push(format!("--initial-cluster-token={}", super::CLUSTER_TOKEN));
            command.push("--initial-cluster-state=new".to_owned());
            container(m, command)
        })
        .collect()
}

/// `etcd-tls`: the server as `etcd-tls-server`, and its set-up as
/// `etcd-tls`, so that `docker compose up etcd-tls` starts both and waits
/// for the accounts (the image has no shell to run the set-up in, and
/// `etcd-tls` is the name the tests' messages give).
pub(super) fn tls(service: &Service) -> Vec<Container> {
    let Some(member) = service.members.first() else {
        return Vec::new();
    };
    let server_name = format!("{}-server", member.instance);
    let initial = format!("tls=http://127.0.0.1:{}", peer_port(member));
    let mut command = command("tls", member, "https", "127.0.0.1", &initial);
    // As the native server: mutual TLS on the client port, the gRPC
    // gateway off (it would dial etcd with the server certificate, which
    // is no client certificate).
    command.extend(
        [
            "--cert-file=/tls/server.pem",
            "--key-file=/tls/server-key.pem",
            "--client-cert-auth",
            "--trusted-ca-file=/tls/ca.pem",
            "--enable-grpc-gateway=false",
        ]
        .map(str::to_owned),
    );
    let server = Container {
        name: server_name.clone(),
        volumes: vec![TLS_MOUNT.to_owned()],
        ..container(member, command)
    };
    let setup = Container {
        name: member.instance.to_owned(),
        image: SETUP_IMAGE.to_owned(),
        entrypoint: vec!["/bin/bash".to_owned(), "-c".to_owned(), setup_script()],
        // The server certificate names localhost and 127.0.0.1, not the
        // container: the set-up (and only it) skips verifying the server.
        // It still shows the client certificate, which the server requires.
        environment: [
            ("ETCDCTL_API", "3".to_owned()),
            (
                "ETCDCTL_ENDPOINTS",
                format!("https://{server_name}:{}", member.port),
            ),
            ("ETCDCTL_CACERT", "/tls/ca.pem".to_owned()),
            ("ETCDCTL_CERT", "/tls/client.pem".to_owned()),
            ("ETCDCTL_KEY", "/tls/client-key.pem".to_owned()),
            ("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "true".to_owned()),
            ("ETCDCTL_DIAL_TIMEOUT", "2s".to_owned()),
            ("ETCDCTL_COMMAND_TIMEOUT", "3s".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
        volumes: vec![TLS_MOUNT.to_owned()],
        depends_on: vec![server_name],
        healthcheck: Some("test -f /tmp/ready".to_owned()),
        ..Container::default()
    };
    vec![server, setup]
}

/// The set-up of the native `services` (see `tls::setup`), as a script:
/// users and roles, then auth on, once; then the checks; then it stays up
/// (healthy) so that `up --wait` knows the accounts are there.
fn setup_script() -> String {
    let (user, password) = (TLS_USER, TLS_PASSWORD);
    format!(
        r#"set -e
apt-get update -qq && apt-get install -y -qq --no-install-recommends etcd-client >/dev/null
until etcdctl endpoint status >/dev/null 2>&1; do sleep 1; done
# With auth off, the login is refused with "authentication is not enabled" and the command runs without.
if etcdctl --user 'root:{password}' user get root 2>&1 | grep -q 'authentication is not enabled'; then
  etcdctl user get root >/dev/null 2>&1 || etcdctl --interactive=false user add 'root:{password}'
  etcdctl user get {user} >/dev/null 2>&1 || etcdctl --interactive=false user add '{user}:{password}'
  etcdctl role get {user} >/dev/null 2>&1 || etcdctl role add {user}
  etcdctl role grant-permission {user} --prefix=true readwrite fencing/
  etcdctl user grant-role root root
  etcdctl user grant-role {user} {user}
  etcdctl auth enable
fi
etcdctl --user '{user}:{password}' get fencing/ >/dev/null
if out=$(etcdctl --user '{user}:{password}' put other/x 1 2>&1); then echo "{user} could write other/x" >&2; exit 1; fi
case $out in *"permission denied"*) ;; *) echo "writing other/x failed, but not for permission: $out" >&2; exit 1 ;; esac
echo "etcd-tls: mutual TLS, auth on, users root and {user} (readwrite on fencing/ only) ready"
touch /tmp/ready
trap 'exit 0' TERM
sleep infinity & wait
"#
    )
}
