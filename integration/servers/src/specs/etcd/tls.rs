//! etcd-tls: mutual TLS on the client port, then users, a role limited to
//! `fencing/`, and auth on.

use std::io::Write;
use std::net::Ipv4Addr;

use crate::{Instance, Launch, Paths, Service, TLS_PASSWORD, TLS_USER};

/// `etcdctl ARGS…` against `https://IP:PORT` with mutual TLS (the test
/// CA, the client certificate), bounded; add `--user` to log in. Its exit
/// status and its stdout and stderr together.
pub fn etcdctl_tls(paths: &Paths, ip: Ipv4Addr, port: u16, args: &[&str]) -> (bool, String) {
    let endpoint = format!("--endpoints=https://{ip}:{port}");
    let (ca, cert, key) = (
        paths.tls_file("ca.pem").display().to_string(),
        paths.tls_file("client.pem").display().to_string(),
        paths.tls_file("client-key.pem").display().to_string(),
    );
    let mut all = vec![
        endpoint.as_str(),
        "--cacert",
        &ca,
        "--cert",
        &cert,
        "--key",
        &key,
        "--dial-timeout=2s",
        "--command-timeout=3s",
    ];
    all.extend_from_slice(args);
    crate::util::output_all(10, "etcdctl", &all, &[("ETCDCTL_API", "3")], None)
}

/// Starts etcd-tls.
pub(super) fn start(i: &Instance) -> Result<Launch, String> {
    let initial = format!("tls={}", super::peer_url(i.ip, &i.peer_ports, &i.name)?);
    let mut args = super::member_args(i, "tls", "https", &initial)?;
    let file = |name: &str| i.paths.tls_file(name).display().to_string();
    // Mutual TLS on the client port (etcd maps a client certificate's CN to
    // a user); users and roles are set up once it serves (setup). The gRPC
    // gateway (JSON over HTTP) is off: it would dial etcd itself with the
    // server certificate, which is no client certificate. The peer port is
    // plain http.
    args.extend([
        "--cert-file".to_owned(),
        file("server.pem"),
        "--key-file".to_owned(),
        file("server-key.pem"),
        "--client-cert-auth".to_owned(),
        "--trusted-ca-file".to_owned(),
        file("ca.pem"),
        "--enable-grpc-gateway=false".to_owned(),
    ]);
    Ok(Launch::new("etcd", args, &i.dir))
}

/// Logs in as the test user over mutual TLS and reads `fencing/`. (Before
/// [`setup`] enabled auth, etcdctl logs in, is told auth is off, and goes
/// on without.)
pub(super) fn probe(i: &Instance) -> bool {
    let login = format!("{TLS_USER}:{TLS_PASSWORD}");
    etcdctl_tls(
        &i.paths,
        i.ip,
        i.port,
        &["--user", &login, "get", "fencing/"],
    )
    .0
}

/// Users and roles, then auth on; once. After that only the check runs:
/// the test user reads `fencing/` and may not write outside it.
pub(super) fn setup(paths: &Paths, service: &Service) -> Result<(), String> {
    let member = service
        .members
        .first()
        .ok_or_else(|| format!("{}: no member", service.name))?;
    // `services` runs its members on 127.0.0.1.
    let (ip, port) = (Ipv4Addr::LOCALHOST, member.port);
    let log = paths.logs.join(format!("{}.log", member.instance));
    let at = format!("{} on {ip}:{port}", member.instance);
    let run = |args: &[&str]| etcdctl_tls(paths, ip, port, args);
    let root = format!("root:{TLS_PASSWORD}");
    let user = format!("{TLS_USER}:{TLS_PASSWORD}");

    // With auth off, etcdctl's login is refused with "authentication is
    // not enabled" (a warning), and the command runs without: the message,
    // not the exit status, tells.
    let (root_ok, out) = run(&["--user", &root, "user", "get", "root"]);
    if out.contains("authentication is not enabled") {
        eprintln!(
            "services: {}: adding users root and {TLS_USER} (role {TLS_USER}: readwrite on fencing/), enabling auth",
            member.instance
        );
        enable_auth(&run, &log).map_err(|step| {
            format!(
                "{at}: setting up auth failed at `etcdctl {step}`; see {}",
                log.display()
            )
        })?;
    } else if !root_ok {
        return Err(format!(
            "{at}: auth is on, but root cannot log in: {}",
            out.trim()
        ));
    }
    if !run(&["--user", &user, "get", "fencing/"]).0 {
        return Err(format!(
            "{at}: user {TLS_USER} cannot read fencing/; see {}",
            log.display()
        ));
    }
    match run(&["--user", &user, "put", "other/x", "1"]) {
        (true, _) => Err(format!(
            "{at}: user {TLS_USER} could write other/x (its role must cover fencing/ only)"
        )),
        (false, out) if !out.contains("permission denied") => Err(format!(
            "{at}: writing other/x failed, but not for permission: {}",
            out.trim()
        )),
        (false, _) => {
            eprintln!(
                "services: {}: mutual TLS, auth on, users root and {TLS_USER} (readwrite on fencing/ only) ready",
                member.instance
            );
            Ok(())
        }
    }
}

/// The steps that turn auth on, each output appended to `log`. Each step
/// may have run before (an `up` cut short): all of them can run again.
/// The failing step, if one fails.
fn enable_auth(
    run: &dyn Fn(&[&str]) -> (bool, String),
    log: &std::path::Path,
) -> Result<(), String> {
    let root = format!("root:{TLS_PASSWORD}");
    let user = format!("{TLS_USER}:{TLS_PASSWORD}");
    let logged = |args: &[&str]| -> bool {
        let (ok, out) = run(args);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = writeln!(f, "$ etcdctl {}\n{}", shown(args), out.trim_end());
        }
        ok
    };
    let step = |args: &[&str]| -> Result<(), String> {
        if logged(args) {
            Ok(())
        } else {
            Err(shown(args))
        }
    };
    // a user or role that is there already is not added again
    for (name, login) in [("root", &root), (TLS_USER, &user)] {
        if !run(&["user", "get", name]).0 {
            step(&["--interactive=false", "user", "add", login])?;
        }
    }
    if !run(&["role", "get", TLS_USER]).0 {
        step(&["role", "add", TLS_USER])?;
    }
    step(&[
        "role",
        "grant-permission",
        TLS_USER,
        "--prefix=true",
        "readwrite",
        "fencing/",
    ])?;
    step(&["user", "grant-role", "root", "root"])?;
    step(&["user", "grant-role", TLS_USER, TLS_USER])?;
    step(&["auth", "enable"])
}

/// A command line for the log and errors, the password left out.
fn shown(args: &[&str]) -> String {
    args.join(" ").replace(TLS_PASSWORD, "***")
}
