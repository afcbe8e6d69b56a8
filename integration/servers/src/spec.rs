//! What a test server is: one [`Service`] per server, written once, from
//! which `services` (up, down, status, env), the harness's [`Server`]s, the
//! nemesis's hosts, private per-test servers and `docker-compose.yml` are
//! derived. The shape of a testcontainers `Image` or a Jepsen `DB`.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::paths::Paths;

/// Which `up` group a service belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Started by a bare `services up`.
    Standard,
    /// Started by `services up all` or by name: clusters, replicas, the
    /// emulator that ignores preconditions.
    OnDemand,
    /// The TLS-only, password-required variants (`services up tls`), and
    /// `pki`, the throwaway CA they share.
    Tls,
}

/// One process of a service, on 127.0.0.1 when `services` runs it.
#[derive(Clone, Copy, Debug)]
pub struct Member {
    /// Its name: pid file, log file, data directory, `status` line.
    pub instance: &'static str,
    /// The port clients use.
    pub port: u16,
    /// The other ports it listens on (an etcd peer port, ZooKeeper's quorum
    /// and election ports), in the order its start function expects them.
    pub peer_ports: &'static [u16],
}

/// How a server is asked to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, SIGKILL after the grace period.
    Term,
    /// SIGINT (PostgreSQL's fast shutdown: rolls back open transactions).
    Int,
    /// SIGTERM twice, a second apart (Azurite closes on the first, then
    /// idles on its timers until the second).
    TermTwice,
}

/// Something a service needs installed.
#[derive(Clone, Copy, Debug)]
pub enum Dep {
    /// A Debian package, installed unless every [`Have`] holds.
    Apt {
        /// The package.
        package: &'static str,
        /// What shows it is there already.
        unless: &'static [Have],
    },
    /// The Python venv under the tools directory with [`crate::PYTHON_TOOLS`].
    Python,
    /// An npm prefix of its own under the tools directory.
    Npm(&'static NpmTools),
}

/// A check that something is present.
#[derive(Clone, Copy, Debug)]
pub enum Have {
    /// A command on `PATH`.
    Command(&'static str),
    /// A file.
    File(&'static str),
    /// Something listens on this port of 127.0.0.1 (a server the machine
    /// runs already: its package is not needed).
    Listening(u16),
    /// A PostgreSQL server under `/usr/lib/postgresql`.
    PostgresServer,
    /// `python3` can make a venv (`import venv, ensurepip`): Debian ships
    /// python3 without python3-venv.
    PythonVenv,
    /// Either of two.
    Either(&'static Have, &'static Have),
}

/// An npm prefix under the tools directory and the packages in it (each
/// prefix alone, so one tool's dependency tree never moves another's).
#[derive(Clone, Copy, Debug)]
pub struct NpmTools {
    /// The prefix directory's name under the tools directory.
    pub prefix: &'static str,
    /// `name@version` packages, space-separated.
    pub packages: &'static str,
}

/// One process about to be started: what `services` spawns detached, what
/// the nemesis runs inside a network namespace, what [`crate::Private`]
/// starts on a free port.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its working directory.
    pub dir: PathBuf,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
}

impl Launch {
    /// `program args…` run in `dir`.
    pub fn new<I, S>(program: impl Into<String>, args: I, dir: impl Into<PathBuf>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            program: program.into(),
            args: args.into_iter().map(Into::into).collect(),
            dir: dir.into(),
            env: Vec::new(),
        }
    }
}

/// A member of a cluster, as the others reach it.
#[derive(Clone, Debug)]
pub struct Peer {
    /// Its address.
    pub ip: Ipv4Addr,
    /// Its client port.
    pub port: u16,
    /// Its other ports, as in [`Member::peer_ports`].
    pub peer_ports: Vec<u16>,
}

/// Where and how one member is started and probed.
#[derive(Clone, Debug)]
pub struct Instance {
    /// Its name (`etcd-cluster-2`); also its pid and log file names.
    pub name: String,
    /// Its member number, from 1 (1 for a single server).
    pub number: usize,
    /// The address it listens on.
    pub ip: Ipv4Addr,
    /// Its client port.
    pub port: u16,
    /// Its other ports, as in [`Member::peer_ports`].
    pub peer_ports: Vec<u16>,
    /// Every member of its cluster, itself included; empty for a single
    /// server.
    pub cluster: Vec<Peer>,
    /// Its data directory (created before `start`).
    pub dir: PathBuf,
    /// The state, tools and PKI directories.
    pub paths: Paths,
}

/// A container of the generated `docker-compose.yml`.
#[derive(Clone, Debug, Default)]
pub struct Container {
    /// The compose service name (the instance's name).
    pub name: String,
    /// The image, with its tag.
    pub image: String,
    /// Its command, if not the image's.
    pub command: Vec<String>,
    /// Its entrypoint, if not the image's.
    pub entrypoint: Vec<String>,
    /// `host:container` ports published on 127.0.0.1.
    pub ports: Vec<(u16, u16)>,
    /// Its environment.
    pub environment: Vec<(String, String)>,
    /// `host:container[:ro]` bind mounts, host paths relative to the
    /// repository root.
    pub volumes: Vec<String>,
    /// Services it waits for.
    pub depends_on: Vec<String>,
    /// A health check command (`CMD-SHELL`).
    pub healthcheck: Option<String>,
}

/// What `services` asks of a cluster.
#[derive(Clone, Copy, Debug)]
pub struct ClusterOps {
    /// The client port of the current leader, if one is known.
    pub leader: fn(&Service) -> Option<u16>,
    /// Whether at least `min` members answer and agree on one leader.
    pub formed: fn(&Service, usize) -> bool,
    /// What the members say, for the error when it does not form.
    pub describe: fn(&Service) -> String,
}

/// A service's set-up, after its members answer.
pub type Setup = fn(&Paths, &Service) -> Result<(), String>;

/// One test server: everything the tree knows about it, in one place.
#[derive(Clone, Copy)]
pub struct Service {
    /// The name `services up`, `FENCING_SKIP` and compose use: `redis-aof`.
    pub name: &'static str,
    /// One line on what it is, for `status`, the README and compose.
    pub about: &'static str,
    /// Its group.
    pub group: Group,
    /// Its processes; none for `pki`.
    pub members: &'static [Member],
    /// The variables it answers to (the harness's [`Server`]s).
    pub servers: &'static [Server],
    /// What it needs installed.
    pub deps: &'static [Dep],
    /// Starts one member: writes its configuration under `instance.dir`
    /// and says what to run.
    pub start: fn(&Instance) -> Result<Launch, String>,
    /// Whether the member answers like this server (bounded in time).
    pub probe: fn(&Instance) -> bool,
    /// What follows its answering: accounts, buckets, that a cluster
    /// formed. Runs at every `up`, so it must be safe to repeat.
    pub setup: Option<Setup>,
    /// How it is asked to stop.
    pub stop: Stop,
    /// For a cluster: who leads, whether it formed (`leader`,
    /// `restart-member`).
    pub cluster: Option<ClusterOps>,
    /// Its containers in `docker-compose.yml`.
    pub compose: fn(&Service) -> Vec<Container>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("name", &self.name)
            .field("group", &self.group)
            .field("members", &self.members)
            .finish_non_exhaustive()
    }
}

/// A server a test needs, as the tests find it: an environment variable,
/// else its default, derived from its service's members.
#[derive(Clone, Copy, Debug)]
pub struct Server {
    /// What to call it in messages, e.g. `"PostgreSQL"`.
    pub name: &'static str,
    /// The service that runs it (`FENCING_SKIP`, `services up`).
    pub service: &'static str,
    /// The environment variable holding its endpoint.
    pub var: &'static str,
    /// The default endpoint: `{port}` is a member's port (with several
    /// members, the form is repeated for each, joined by `,`),
    /// `{user}`/`{password}` the TLS variants' account, `{tls_dir}` the PKI
    /// directory.
    pub form: &'static str,
    /// The members whose ports fill `{port}`.
    pub members: &'static [Member],
}

impl Server {
    /// The endpoint when the variable is unset.
    pub fn default_endpoint(&self) -> String {
        if self.form.contains("{port}") {
            let all: Vec<String> = self
                .members
                .iter()
                .map(|m| self.endpoint_at(m.port))
                .collect();
            all.join(",")
        } else {
            self.endpoint_at(0)
        }
    }

    /// The endpoint of a server like this one listening on `port` (a
    /// private one, say).
    pub fn endpoint_at(&self, port: u16) -> String {
        let mut s = self
            .form
            .replace("{user}", crate::TLS_USER)
            .replace("{password}", crate::TLS_PASSWORD)
            .replace("{port}", &port.to_string());
        if s.contains("{tls_dir}") {
            s = s.replace("{tls_dir}", &Paths::from_env().tls.display().to_string());
        }
        s
    }

    /// The endpoint: the variable if set, the default otherwise.
    pub fn endpoint(&self) -> String {
        std::env::var(self.var).unwrap_or_else(|_| self.default_endpoint())
    }

    /// Whether this run asked to skip the server (`FENCING_SKIP`). Prints
    /// that it was skipped, so a skip is never silent.
    pub fn skipped(&self) -> bool {
        let skip = std::env::var("FENCING_SKIP").unwrap_or_default();
        let asked = skip
            .split(',')
            .map(str::trim)
            .any(|s| s == self.service || s == "all");
        if asked {
            eprintln!(
                "SKIPPED: {} tests (FENCING_SKIP={skip}); remove it to run them",
                self.name
            );
        }
        asked
    }

    /// Fails the test with a message naming the server, the endpoint and
    /// how to start it.
    pub fn unavailable(&self, error: &dyn std::fmt::Display) -> ! {
        panic!(
            "{name} is not answering at {endpoint} ({var}): {error}\n\
             Start it with `integration/services.sh up {service}` (or `docker compose up {service}`), \
             point {var} at a running server, or skip these tests explicitly with FENCING_SKIP={service}.",
            name = self.name,
            endpoint = self.endpoint(),
            var = self.var,
            service = self.service,
        )
    }
}
