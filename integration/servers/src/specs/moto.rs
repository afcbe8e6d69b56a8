//! moto: S3 (plain and HTTPS) and DynamoDB, served one request at a time so
//! that conditional writes are atomic.

use std::path::{Path, PathBuf};

use super::{OPENSSL, PYTHON3, PYTHON3_VENV};
use crate::util::curl;
use crate::{Container, Dep, Group, Instance, Launch, Member, Server, Service, Stop};

const DEPS: &[Dep] = &[PYTHON3, PYTHON3_VENV, Dep::Python];
const TLS_DEPS: &[Dep] = &[DEPS[0], DEPS[1], DEPS[2], OPENSSL];

const S3_MEMBERS: &[Member] = &[Member {
    instance: "s3",
    port: 9000,
    peer_ports: &[],
}];
const DYNAMODB_MEMBERS: &[Member] = &[Member {
    instance: "dynamodb",
    port: 5010,
    peer_ports: &[],
}];
const S3_TLS_MEMBERS: &[Member] = &[Member {
    instance: "s3-tls",
    port: 9443,
    peer_ports: &[],
}];

/// The S3 emulator (moto).
pub const S3: Server = Server {
    name: "S3 (moto)",
    service: "s3",
    var: "FENCING_S3_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: S3_MEMBERS,
};
/// moto's DynamoDB, served one request at a time so that its conditional
/// writes are atomic.
pub const DYNAMODB: Server = Server {
    name: "DynamoDB (moto)",
    service: "dynamodb",
    var: "FENCING_DYNAMODB_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: DYNAMODB_MEMBERS,
};
/// S3 (moto) over HTTPS with the throwaway CA's certificate.
pub const S3_TLS: Server = Server {
    name: "S3 (moto, HTTPS)",
    service: "s3-tls",
    var: "FENCING_S3_TLS_ENDPOINT",
    form: "https://127.0.0.1:{port}",
    members: S3_TLS_MEMBERS,
};

/// `s3`.
pub const S3_SERVICE: Service = Service {
    name: "s3",
    about: "moto S3, one request at a time (its threaded server races on conditional writes); path-style, any credentials, region `us-east-1`",
    group: Group::Standard,
    members: S3_MEMBERS,
    servers: &[S3],
    deps: DEPS,
    start,
    probe: probe_s3,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose_plain,
};
/// `dynamodb`.
pub const DYNAMODB_SERVICE: Service = Service {
    name: "dynamodb",
    about: "moto's DynamoDB, one request at a time, so its conditional writes are atomic; any credentials, region `us-east-1`",
    group: Group::OnDemand,
    members: DYNAMODB_MEMBERS,
    servers: &[DYNAMODB],
    deps: DEPS,
    // The same single-threaded launcher (it serves every AWS service):
    // conditional writes stay atomic.
    start,
    probe: probe_dynamodb,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose_plain,
};
/// `s3-tls`.
pub const S3_TLS_SERVICE: Service = Service {
    name: "s3-tls",
    about: "moto S3 over HTTPS, one request at a time like `s3`",
    group: Group::Tls,
    members: S3_TLS_MEMBERS,
    servers: &[S3_TLS],
    deps: TLS_DEPS,
    start: start_tls,
    probe: probe_tls,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: compose_tls,
};

/// The launcher's file name under the tools directory.
pub const LAUNCHER_FILE: &str = "moto_s3_server.py";

// moto's stock moto_server serves requests on threads, and its S3 conditional
// writes (If-Match / If-None-Match) race there. One request at a time makes
// them atomic. With a certificate and key (s3-tls) it serves HTTPS only.
// (`python -c LAUNCHER HOST PORT` sees the same sys.argv[1:], which is how the
// compose file runs it inside moto's image.)
const LAUNCHER: &str = r#""""moto S3 emulator, single-threaded (written by fencing-servers: integration/servers/src/specs/moto.rs).

Usage: moto_s3_server.py HOST PORT [CERT KEY]   (with CERT and KEY: HTTPS)
"""
import os
import sys

host, port = sys.argv[1], int(sys.argv[2])
ssl_context = (sys.argv[3], sys.argv[4]) if len(sys.argv) > 4 else None
os.environ.setdefault("MOTO_PORT", str(port))

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import WSGIRequestHandler, run_simple


class OneAtATime(WSGIRequestHandler):
    # One request at a time means one stalled client (a paused process that
    # connected and stopped before its request was sent) would stall every
    # other client for as long as it stays paused. A real server serves the
    # others: give up on a connection that sends nothing for this long.
    timeout = 3


app = DomainDispatcherApplication(create_backend_app)
run_simple(host, port, app, threaded=False, processes=1, use_reloader=False,
           ssl_context=ssl_context, request_handler=OneAtATime)
"#;

/// Starts moto on `instance.ip:instance.port`, plain HTTP: the start of `s3`
/// and `dynamodb` (moto answers every AWS service on one port), and what the
/// nemesis runs in a namespace host (the instance's address is the host's).
/// Writes the single-threaded launcher under the tools directory first.
pub fn start(instance: &Instance) -> Result<Launch, String> {
    moto_launch(instance, &[])
}

/// Starts moto serving HTTPS only, with the test PKI's server certificate.
fn start_tls(instance: &Instance) -> Result<Launch, String> {
    let cert = instance.paths.tls_file("server.pem");
    let key = instance.paths.tls_file("server-key.pem");
    for file in [&cert, &key] {
        if !file.is_file() {
            return Err(format!(
                "{}: no test certificate at {} (run: integration/services.sh up pki)",
                instance.name,
                file.display()
            ));
        }
    }
    moto_launch(instance, &[cert, key])
}

fn moto_launch(instance: &Instance, tls: &[PathBuf]) -> Result<Launch, String> {
    let python = instance.paths.python();
    if !python.is_file() {
        return Err(format!(
            "{}: moto is not installed: no {} (run: integration/services.sh deps s3)",
            instance.name,
            python.display()
        ));
    }
    let launcher = instance.paths.tools.join(LAUNCHER_FILE);
    write_launcher(&launcher).map_err(|e| format!("{}: {e}", instance.name))?;
    let mut args = vec![
        launcher.display().to_string(),
        instance.ip.to_string(),
        instance.port.to_string(),
    ];
    args.extend(tls.iter().map(|p| p.display().to_string()));
    Ok(Launch::new(
        python.display().to_string(),
        args,
        &instance.dir,
    ))
}

/// Writes the launcher unless it is there already. Through a temporary file
/// and a rename: s3, dynamodb and s3-tls start together, and a Python
/// reading the file must never see half of it.
fn write_launcher(path: &Path) -> Result<(), String> {
    if std::fs::read_to_string(path).is_ok_and(|t| t == LAUNCHER) {
        return Ok(());
    }
    // One name per writer: per process, and per call within one (tests
    // start several members at once).
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nth = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let partial = path.with_extension(format!("py.{}-{nth}.tmp", std::process::id()));
    crate::util::write(&partial, LAUNCHER)?;
    std::fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Anonymous ListBuckets.
fn probe_s3(instance: &Instance) -> bool {
    let url = format!("http://{}:{}/", instance.ip, instance.port);
    curl(&[&url]).is_some_and(|out| out.contains("ListAllMyBucketsResult"))
}

/// ListTables; moto routes by the credential scope's service name (it
/// checks no signature).
fn probe_dynamodb(instance: &Instance) -> bool {
    let url = format!("http://{}:{}/", instance.ip, instance.port);
    curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/x-amz-json-1.0",
        "-H",
        "X-Amz-Target: DynamoDB_20120810.ListTables",
        "-H",
        "Authorization: AWS4-HMAC-SHA256 Credential=test/20250101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0",
        "-d",
        "{}",
        &url,
    ])
    .is_some_and(|out| out.contains("\"TableNames\""))
}

/// Anonymous ListBuckets over HTTPS, the certificate checked against the
/// test CA.
fn probe_tls(instance: &Instance) -> bool {
    let url = format!("https://{}:{}/", instance.ip, instance.port);
    let ca = instance.paths.tls_file("ca.pem").display().to_string();
    curl(&["--cacert", &ca, &url]).is_some_and(|out| out.contains("ListAllMyBucketsResult"))
}

/// moto's image at the version the venv pins.
const IMAGE: &str = "motoserver/moto:5.2.5";

// In the container: the same launcher, run with `python -c` (the image has
// moto, not our tools directory), listening on every address of the
// container; the port inside is the native one.
fn compose_plain(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| moto_container(m, &[], false))
        .collect()
}

// s3-tls: the test PKI mounted read-only at /tls (made by
// `integration/services.sh up pki`); the image runs as root, which reads
// the key.
fn compose_tls(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| moto_container(m, &["/tls/server.pem", "/tls/server-key.pem"], true))
        .collect()
}

fn moto_container(member: &Member, tls: &[&str], https: bool) -> Container {
    let mut entrypoint = vec![
        "python".to_owned(),
        "-c".to_owned(),
        LAUNCHER.to_owned(),
        "0.0.0.0".to_owned(),
        member.port.to_string(),
    ];
    entrypoint.extend(tls.iter().map(|s| (*s).to_owned()));
    let (imports, scheme, context) = if https {
        (
            "ssl, urllib.request",
            "https",
            ", context=ssl.create_default_context(cafile='/tls/ca.pem')",
        )
    } else {
        ("urllib.request", "http", "")
    };
    Container {
        name: member.instance.to_owned(),
        image: IMAGE.to_owned(),
        entrypoint,
        ports: vec![(member.port, member.port)],
        volumes: if https {
            vec!["./integration/.state/tls:/tls:ro".to_owned()]
        } else {
            Vec::new()
        },
        // Any answer will do (a 4xx raises too, but moto answers `/` with
        // 200 ListBuckets on S3 and DynamoDB alike).
        healthcheck: Some(format!(
            "python -c \"import {imports}; urllib.request.urlopen('{scheme}://127.0.0.1:{}/', timeout=3{context})\"",
            member.port
        )),
        ..Container::default()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::Private;
    use crate::private::standard::probe_standard;

    fn started(service: &Service) -> Private {
        Private::start(service, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_launcher_takes_host_port_and_optional_tls_from_argv() {
        assert!(LAUNCHER.contains("threaded=False, processes=1"));
        assert!(LAUNCHER.contains("request_handler=OneAtATime"));
        assert!(LAUNCHER.contains("host, port = sys.argv[1], int(sys.argv[2])"));
        let c = compose_tls(&S3_TLS_SERVICE);
        assert_eq!(c[0].ports, [(9443, 9443)]);
        assert_eq!(
            c[0].entrypoint[3..],
            ["0.0.0.0", "9443", "/tls/server.pem", "/tls/server-key.pem"]
        );
    }

    /// A client that connects and sends nothing (a process paused between
    /// its connect and its request) must not stall the one-at-a-time
    /// server for the others: they are answered once its connection times
    /// out, not never.
    #[test]
    fn a_stalled_client_does_not_stall_the_others() {
        use std::io::Write;
        let dynamodb = started(&DYNAMODB_SERVICE);
        let mut stalled =
            std::net::TcpStream::connect((Ipv4Addr::LOCALHOST, dynamodb.port())).unwrap();
        stalled
            .write_all(b"POST / HTTP/1.1\r\nHost: x\r\n")
            .unwrap(); // and nothing more
        std::thread::sleep(std::time::Duration::from_millis(200));
        let started = std::time::Instant::now();
        // curl gives up after 3 s a try: three tries cover the server's
        // 3 s timeout on the stalled connection.
        let answered = (0..3).any(|_| (DYNAMODB_SERVICE.probe)(dynamodb.instance()));
        assert!(
            answered,
            "moto answered nobody for {:?} while one client stalled",
            started.elapsed()
        );
        drop(stalled);
    }

    #[test]
    fn s3_and_dynamodb_start_on_free_ports_and_answer() {
        let _s3 = started(&S3_SERVICE);
        let _dynamodb = started(&DYNAMODB_SERVICE);
    }

    #[test]
    fn s3_listens_on_the_instance_address_only() {
        // The nemesis starts it on a namespace host's address: another
        // loopback address stands in for one.
        let s3 = Private::build(&S3_SERVICE)
            .on(Ipv4Addr::new(127, 0, 0, 2))
            .start()
            .unwrap_or_else(|e| panic!("{e}"));
        let elsewhere = Instance {
            ip: Ipv4Addr::LOCALHOST,
            ..s3.instance().clone()
        };
        assert!(!probe_s3(&elsewhere), "moto answered on 127.0.0.1 too");
    }

    #[test]
    fn s3_tls_starts_on_a_free_port_and_serves_https_only() {
        let s3 = Private::build(&S3_TLS_SERVICE)
            .own_pki()
            .start()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!probe_s3(s3.instance()), "plain HTTP answered on s3-tls");
    }

    #[test]
    fn the_standard_servers_answer() {
        probe_standard(&[&S3_SERVICE, &DYNAMODB_SERVICE, &S3_TLS_SERVICE]);
    }
}
