//! For the tests of Redis, PostgreSQL and MariaDB: a member started from
//! its spec on free ports, under a state directory of its own (logs, data
//! and, for the TLS variants, a test PKI made here), stopped as `services`
//! stops it and removed when dropped. Unlike [`crate::Private`], the state
//! directory (hence the PKI) is the test's, not the checkout's.

use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::util::{have, output_all, port_open};
use crate::{Group, Instance, Member, Paths, Peer, Service, Stop};

/// How long a scratch server may take to answer (initdb and
/// mariadb-install-db run before it listens).
const ANSWER_WITHIN: Duration = Duration::from_secs(90);

/// A scratch state directory, removed when dropped.
pub(crate) struct Scratch {
    /// Its directories.
    pub(crate) paths: Paths,
}

impl Scratch {
    /// A new, empty state directory (short: MariaDB's socket lives under
    /// it, and a socket path must fit in 108 bytes).
    pub(crate) fn new(label: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = PathBuf::from("/tmp").join(format!(
            "fh3-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        let paths = Paths::new(&root, None);
        for dir in [&paths.logs, &paths.data] {
            fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        Self { paths }
    }

    /// Like [`Scratch::new`], with a test PKI (CA, server certificate for
    /// localhost and 127.0.0.1) in its TLS directory.
    pub(crate) fn with_pki(label: &str) -> Self {
        let scratch = Self::new(label);
        make_pki(&scratch.paths.tls);
        scratch
    }

    /// Member `number` (from 1) of `cluster`, named `name`, on `port` of
    /// 127.0.0.1, its data directory made.
    pub(crate) fn instance(
        &self,
        name: &str,
        number: usize,
        port: u16,
        cluster: &[u16],
    ) -> Instance {
        let dir = self.paths.data.join(name);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Instance {
            name: name.to_owned(),
            number,
            ip: Ipv4Addr::LOCALHOST,
            port,
            peer_ports: Vec::new(),
            cluster: cluster
                .iter()
                .map(|&port| Peer {
                    ip: Ipv4Addr::LOCALHOST,
                    port,
                    peer_ports: Vec::new(),
                })
                .collect(),
            dir,
            paths: self.paths.clone(),
        }
    }

    /// Starts `instance` from `service`'s spec, as `services` would (output
    /// appended to its log), and waits until the probe answers. Fails, never
    /// skips, when the program is missing.
    pub(crate) fn start(&self, service: &Service, instance: &Instance) -> Running {
        let launch = (service.start)(instance).unwrap_or_else(|e| {
            panic!(
                "{}: cannot start: {e} (missing? `integration/services.sh deps {}`)",
                service.name, service.name
            )
        });
        assert!(
            have(&launch.program) || Path::new(&launch.program).is_file(),
            "{} is not installed: run `integration/services.sh deps {}`",
            launch.program,
            service.name
        );
        let log = self.paths.logs.join(format!("{}.log", instance.name));
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let err = out.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(&launch.program)
            .args(&launch.args)
            .current_dir(&launch.dir)
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", launch.program));
        let mut running = Running {
            child,
            stop: service.stop,
            log,
        };
        let started = Instant::now();
        while !(service.probe)(instance) {
            let exited = running.child.try_wait().ok().flatten();
            assert!(
                exited.is_none() && started.elapsed() < ANSWER_WITHIN,
                "{} on 127.0.0.1:{} did not answer ({}); its log ends:\n{}",
                instance.name,
                instance.port,
                exited.map_or_else(|| "timed out".to_owned(), |s| s.to_string()),
                running.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        running
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.paths.state);
    }
}

/// A started server, stopped (as `services down` stops it) when dropped.
pub(crate) struct Running {
    child: Child,
    stop: Stop,
    log: PathBuf,
}

impl Running {
    /// The last lines of its log.
    pub(crate) fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Stops it and waits for its end (SIGKILL after 15 s).
    pub(crate) fn stop(&mut self) {
        let signal = match self.stop {
            Stop::Int => "-INT",
            Stop::Term | Stop::TermTwice => "-TERM",
        };
        // (kill(1), not libc: the crate forbids unsafe code)
        let _ = output_all(
            5,
            "kill",
            &[signal, &self.child.id().to_string()],
            &[],
            None,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A free port of 127.0.0.1 (free when asked).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// `base` with its members on `ports` (names kept): what a set-up reads its
/// ports from. Leaked: a test's lifetime.
pub(crate) fn service_on(base: &Service, ports: &[u16]) -> &'static Service {
    assert_eq!(base.members.len(), ports.len(), "{}", base.name);
    let members: Vec<Member> = base
        .members
        .iter()
        .zip(ports)
        .map(|(m, &port)| Member { port, ..*m })
        .collect();
    Box::leak(Box::new(Service {
        members: Box::leak(members.into_boxed_slice()),
        ..*base
    }))
}

/// Probes the members of `services` where `services up` runs them (on
/// 127.0.0.1, the checkout's paths): a standard service's must answer, the
/// others' wherever something listens on their ports. Then runs, again,
/// the set-ups of those whose members all answered (they are idempotent).
pub(crate) fn probe_standard(services: &[&Service]) {
    let paths = Paths::from_env();
    for service in services {
        let mut all = true;
        for member in service.members {
            let instance = Instance {
                name: member.instance.to_owned(),
                number: 1,
                ip: Ipv4Addr::LOCALHOST,
                port: member.port,
                peer_ports: member.peer_ports.to_vec(),
                cluster: Vec::new(),
                dir: paths.data.join(member.instance),
                paths: paths.clone(),
            };
            if service.group != Group::Standard && !port_open(instance.ip, member.port) {
                eprintln!(
                    "{}: nothing on 127.0.0.1:{}, not probed",
                    member.instance, member.port
                );
                all = false;
                continue;
            }
            assert!(
                (service.probe)(&instance),
                "{} does not answer on 127.0.0.1:{}: start it with `integration/services.sh up {}`",
                member.instance,
                member.port,
                service.name
            );
        }
        if let (true, Some(setup)) = (all, service.setup) {
            setup(&paths, service).unwrap_or_else(|e| panic!("{}: {e}", service.name));
        }
    }
}

/// What `integration/services.sh`'s make_pki makes, minus the client
/// certificate and the second CA (no test here needs them).
fn make_pki(dir: &Path) {
    assert!(
        have("openssl"),
        "openssl is not installed: run `integration/services.sh deps pki`"
    );
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let cnf = "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n\
               [ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
               [server]\nbasicConstraints = critical, CA:FALSE\n\
               keyUsage = critical, digitalSignature, keyEncipherment\nextendedKeyUsage = serverAuth\n\
               subjectAltName = DNS:localhost, IP:127.0.0.1\n";
    fs::write(dir.join("openssl.cnf"), cnf).unwrap_or_else(|e| panic!("{e}"));
    let d = dir.display().to_string();
    let steps: [&[&str]; 5] = [
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "ca-key.pem",
        ],
        &[
            "req",
            "-x509",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            "ca-key.pem",
            "-subj",
            "/CN=fencing scratch CA",
            "-extensions",
            "ca",
            "-days",
            "2",
            "-out",
            "ca.pem",
        ],
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "server-key.pem",
        ],
        &[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            "server-key.pem",
            "-subj",
            "/CN=localhost",
            "-out",
            "server.csr",
        ],
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            "1",
            "-days",
            "2",
            "-extfile",
            "openssl.cnf",
            "-extensions",
            "server",
            "-out",
            "server.pem",
        ],
    ];
    for step in steps {
        let mut args = vec!["-C", &d, "openssl"];
        args.extend_from_slice(step);
        let (ok, out) = output_all(60, "env", &args, &[], None);
        assert!(ok, "openssl {}: {out}", step.join(" "));
    }
    // (make_pki leaves every file world-readable: the servers run as their
    // own users)
    for name in ["ca.pem", "ca-key.pem", "server.pem", "server-key.pem"] {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.join(name), fs::Permissions::from_mode(0o644))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
