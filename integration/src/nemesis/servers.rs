//! The servers the nemesis runs inside its hosts: a 3-member etcd cluster, a
//! 3-server ZooKeeper ensemble, PostgreSQL and moto (S3), each a process of
//! its own in its host's namespace, with its data and log under a temporary
//! directory. The binaries are the ones `integration/services.sh` installs.

use std::fs;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fencing_harness::process::{Signal, send_signal};

use super::net::{Host, Net, run};

mod cluster;
pub use cluster::{Cluster, ClusterKind};

/// One server process in a host, restartable with the same command.
#[derive(Debug)]
pub struct Proc {
    /// Where it runs.
    pub host: Host,
    program: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl Proc {
    fn new(host: &Host, program: &str, args: Vec<String>, log: PathBuf) -> Self {
        Self {
            host: host.clone(),
            program: program.to_owned(),
            args,
            log,
            child: None,
        }
    }

    /// Starts it (again).
    pub fn start(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("{}: {e}", self.log.display()))?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        let child = self
            .host
            .command(&self.program)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {} in {}: {e}", self.program, self.host.ns))?;
        self.child = Some(child);
        Ok(())
    }

    /// Starts it and waits until it accepts connections on `port`.
    fn serving(mut self, port: u16) -> Result<Self, String> {
        self.start()?;
        let addr = SocketAddr::from((self.host.ip, port));
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_ok() {
                return Ok(self);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{} in {} did not answer on {addr} within 30 s; its log ends:\n{}",
            self.program,
            self.host.ns,
            self.log_tail()
        ))
    }

    /// Whether it was started and not killed.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, signal: Signal) {
        if let Some(child) = &self.child {
            self::signal(child.id(), signal);
        }
    }

    /// SIGKILL, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGSTOP: it keeps its sockets but answers nothing.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.resume();
        self.kill();
    }
}

/// Sends `sig` to process `pid`, if it is still there (a fault on a
/// process that already exited is no fault).
pub fn signal(pid: u32, sig: Signal) {
    let _ = send_signal(pid, sig);
}

/// A PostgreSQL server of its own (initdb'd into `dir`, trust auth from the
/// bridge) in `host`; returns it and its URL.
pub fn postgres(host: &Host, dir: &Path) -> Result<(Proc, String), String> {
    let bin = fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("PostgreSQL is not installed (/usr/lib/postgresql: {e})"))?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .max()
        .ok_or("no PostgreSQL server under /usr/lib/postgresql")?;
    let data = dir.join("postgres");
    fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    let data_s = data.display().to_string();
    run("chown", &["-R", "postgres:postgres", &data_s])?;
    // The parent of a data directory must be traversable by its owner.
    run("chmod", &["755", &dir.display().to_string()])?;
    let as_postgres = |program: &Path, args: &[&str]| {
        let mut all = vec!["--reuid=postgres", "--regid=postgres", "--init-groups"];
        let program = program.display().to_string();
        all.push(&program);
        all.extend_from_slice(args);
        run("setpriv", &all)
    };
    as_postgres(
        &bin.join("initdb"),
        &["-D", &data_s, "-A", "trust", "-U", "postgres", "--no-sync"],
    )?;
    let mut hba = fs::OpenOptions::new()
        .append(true)
        .open(data.join("pg_hba.conf"))
        .map_err(|e| e.to_string())?;
    writeln!(hba, "host all all 0.0.0.0/0 trust").map_err(|e| e.to_string())?;
    let args = [
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        &bin.join("postgres").display().to_string(),
        "-D",
        &data_s,
        "-c",
        &format!("listen_addresses={}", host.ip),
        "-c",
        "port=5432",
        "-c",
        &format!("unix_socket_directories={data_s}"),
        // The nemesis never crashes PostgreSQL (the restart tests cover
        // durability): commits need not wait for the disk.
        "-c",
        "synchronous_commit=off",
    ]
    .map(str::to_owned)
    .to_vec();
    let proc = Proc::new(host, "setpriv", args, dir.join("postgres.log")).serving(5432)?;
    Ok((
        proc,
        format!("postgres://postgres@{}:5432/postgres", host.ip),
    ))
}

/// moto (the S3 emulator `services.sh` installs) in `host`, with `bucket`
/// created; returns it and the store URL. The same process serves
/// DynamoDB ([`dynamodb_url`]): moto answers every AWS service on one port.
pub fn moto(host: &Host, dir: &Path, bucket: &str) -> Result<(Proc, String), String> {
    let state = std::env::var_os("FENCING_STATE_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join(".state"),
        PathBuf::from,
    );
    let tools =
        std::env::var_os("FENCING_TOOLS_DIR").map_or_else(|| state.join("tools"), PathBuf::from);
    let python = tools.join("venv/bin/python");
    let launcher = tools.join("moto_s3_server.py");
    if !python.exists() || !launcher.exists() {
        return Err(format!(
            "moto is not installed under {}: run `integration/services.sh up s3` once",
            tools.display()
        ));
    }
    let args = vec![
        launcher.display().to_string(),
        host.ip.to_string(),
        "9000".to_owned(),
    ];
    let proc = Proc::new(
        host,
        &python.display().to_string(),
        args,
        dir.join("moto.log"),
    )
    .serving(9000)?;
    let endpoint = format!("http://{}:9000", host.ip);
    run(
        "curl",
        &[
            "-sS",
            "-f",
            "-m",
            "5",
            "-X",
            "PUT",
            &format!("{endpoint}/{bucket}"),
        ],
    )?;
    Ok((
        proc,
        format!("s3://{bucket}?endpoint={endpoint}&path_style=true&emulator=true&region=us-east-1"),
    ))
}

/// The hosts of a run: the lock service's, the stores', and one per client.
#[derive(Debug)]
pub struct Topology {
    /// The bridge; dropped last (after the processes in it).
    pub net: Net,
    /// The issuer's hosts, which client-link faults cut a client off from:
    /// the lock service's three members, or the one server that is issuer
    /// and store.
    pub members: Vec<Host>,
    /// PostgreSQL's host (none in a single-server run).
    pub postgres: Option<Host>,
    /// moto's host.
    pub s3: Host,
    /// One host per client.
    pub clients: Vec<Host>,
}

impl Topology {
    /// Builds the namespaces of a cluster run: three members, PostgreSQL,
    /// moto and the clients.
    pub fn new(prefix: &str, clients: usize) -> Result<Self, String> {
        let mut net = Net::new()?;
        let members = (1..=3)
            .map(|i| net.add_host(&format!("{prefix}{i}")))
            .collect::<Result<_, _>>()?;
        let postgres = Some(net.add_host("pg")?);
        let s3 = net.add_host("s3")?;
        let clients = Self::clients(&mut net, clients)?;
        Ok(Self {
            net,
            members,
            postgres,
            s3,
            clients,
        })
    }

    /// Builds the namespaces of a single-server run: moto, which is both the
    /// issuer and the store (so the clients' links to it are the ones
    /// faults cut), and the clients.
    pub fn single_server(clients: usize) -> Result<Self, String> {
        let mut net = Net::new()?;
        let s3 = net.add_host("moto")?;
        let clients = Self::clients(&mut net, clients)?;
        Ok(Self {
            net,
            members: vec![s3.clone()],
            postgres: None,
            s3,
            clients,
        })
    }

    fn clients(net: &mut Net, clients: usize) -> Result<Vec<Host>, String> {
        (1..=clients)
            .map(|i| net.add_host(&format!("c{i}")))
            .collect()
    }
}

/// The DynamoDB URL of `table` on the moto that [`moto`] started in
/// `host` (issuer and store, the table made by the first open).
pub fn dynamodb_url(host: &Host, table: &str) -> String {
    format!(
        "dynamodb://{table}?endpoint=http://{}:9000&emulator=true&create_table=true",
        host.ip
    )
}

/// A command running `program` in `host`, or in the root namespace.
pub fn client_command(host: Option<&Host>, program: &Path) -> Command {
    match host {
        Some(host) => host.command(&program.display().to_string()),
        None => Command::new(program),
    }
}
