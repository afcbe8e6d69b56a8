//! Foreign lock clients (redis-py, kazoo and python-etcd3 run by Python, Curator run by
//! the JDK, node-redlock and node-redisson run by Node.js), for the tests that hold a lock
//! the way another program does.
//! Each talks in lines: it prints what it did, and acts on each line it
//! reads.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The jars of Curator's `InterProcessMutex` and what it needs, as
/// Debian's `libcurator-recipes-java` installs them.
const CURATOR_JARS: [&str; 8] = [
    "curator-recipes",
    "curator-framework",
    "curator-client",
    "zookeeper",
    "zookeeper-jute",
    "guava",
    "slf4j-api",
    "slf4j-nop",
];

/// A foreign lock client in a process of its own, killed when dropped.
pub struct Client {
    what: &'static str,
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Client {
    /// Runs the Python `script` with `args` (`FENCING_PYTHON`, default the
    /// venv `integration/services.sh` installs). Fails, naming how to
    /// install it, if the interpreter or `module` (the pip package
    /// `requirement`) is missing.
    pub fn python(module: &str, requirement: &str, script: &str, args: &[&str]) -> Self {
        let python = std::env::var_os("FENCING_PYTHON").map_or_else(
            || fencing_servers::Paths::from_env().python(),
            PathBuf::from,
        );
        let how = format!(
            "install it with `integration/.state/tools/venv/bin/pip install {requirement}` \
             (integration/services.sh installs it into that venv), or point FENCING_PYTHON at a \
             Python that has it"
        );
        match std::process::Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
        {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "{} cannot import {module}: {}\n{how}",
                python.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            Err(e) => panic!("no Python at {} ({e}): {how}", python.display()),
        }
        let mut command = tokio::process::Command::new(&python);
        command.arg("-c").arg(script).args(args);
        Self::spawn("Python", command)
    }

    /// python-etcd3's `Lock(name)` (key `/locks/{name}`, a lease of
    /// `ttl_secs`) on the etcd at `endpoint` (its first, if a list), in
    /// lines (`foreign/python_etcd3.py`). Waits until it is connected.
    pub async fn python_etcd3(endpoint: &str, name: &str, ttl_secs: u64) -> Self {
        let endpoint = endpoint.split(',').next().unwrap_or(endpoint);
        let script = include_str!("../foreign/python_etcd3.py");
        // The release the tests were written against, and the releases of
        // its dependencies it still runs with (see integration/services.sh).
        let requirement = "etcd3==0.12.0 protobuf==3.20.3 tenacity==6.3.1";
        let args = [endpoint, name, &ttl_secs.to_string()];
        let mut client = Self::python("etcd3", requirement, script, &args);
        let ready = client.line().await;
        assert_eq!(ready, "ready", "python-etcd3's first line");
        client
    }

    /// kazoo's `Lock` on `path` of the ZooKeeper at `hosts`, in a session
    /// of `session`, seeing our lock nodes (`extra_lock_patterns`), in
    /// lines (`foreign/kazoo_lock.py`). Waits until it has a session.
    pub async fn kazoo(hosts: &str, path: &str, session: std::time::Duration) -> Self {
        let script = include_str!("../foreign/kazoo_lock.py");
        let session = session.as_secs_f64().to_string();
        let mut client = Self::python("kazoo", "kazoo==2.11.0", script, &[hosts, path, &session]);
        let ready = client.line().await;
        assert_eq!(ready, "ready", "kazoo's first line");
        client
    }

    /// redis-py's `Lock` on `key` of the Redis at `url`, in lines
    /// (`foreign/redis_py_lock.py`). Waits until it is connected.
    pub async fn redis_py(url: &str, key: &str) -> Self {
        let script = include_str!("../foreign/redis_py_lock.py");
        let mut client = Self::python("redis", "redis==8.1.0", script, &[url, key]);
        let ready = client.line().await;
        assert_eq!(ready, "ready", "redis-py's first line");
        client
    }

    /// Curator's `InterProcessMutex` on `path` of the ZooKeeper at `hosts`,
    /// in a session of `session` (`foreign/CuratorLock.java`, run from
    /// source by `java`; the jars from `FENCING_CURATOR_JARS`, default
    /// Debian's `/usr/share/java`). Waits until it has a session. Fails,
    /// naming the packages, if the JDK or a jar is missing.
    pub async fn curator(hosts: &str, path: &str, session: std::time::Duration) -> Self {
        let dir = std::env::var_os("FENCING_CURATOR_JARS")
            .map_or_else(|| PathBuf::from("/usr/share/java"), PathBuf::from);
        let how = "install Debian's libcurator-recipes-java and default-jdk-headless \
                   (`integration/services.sh up zookeeper` does), or point FENCING_CURATOR_JARS \
                   at a folder with these jars";
        let jars: Vec<PathBuf> = CURATOR_JARS
            .iter()
            .map(|name| dir.join(format!("{name}.jar")))
            .collect();
        if let Some(missing) = jars.iter().find(|jar| !jar.is_file()) {
            panic!("no {}: {how}", missing.display());
        }
        let classpath = std::env::join_paths(&jars).expect("jar paths");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("foreign/CuratorLock.java");
        let mut command = tokio::process::Command::new("java");
        command.arg("-cp").arg(classpath).arg(source).args([
            hosts,
            path,
            &session.as_millis().to_string(),
        ]);
        let mut client = Self::spawn("Curator", command);
        let ready = client.line().await;
        assert_eq!(ready, "ready", "Curator's first line ({how})");
        client
    }

    /// node-redlock 4 (with ioredis) on `key` of the Redis at `url`
    /// (`foreign/redlock.js`). Waits until it is connected.
    pub async fn redlock(url: &str, key: &str) -> Self {
        Self::node("node-redlock", "redlock.js", &[url, key]).await
    }

    /// node-redisson (Redisson's `RLock` ported to Node.js, with ioredis) on
    /// the lock `name` of the Redis at `url`, each grant a lease of
    /// `lease`; `fenced`: its try-lock also counts the grant in
    /// `RFencedLock`'s token counter and `take` prints the token
    /// (`foreign/redisson.js`). Waits until it is connected.
    pub async fn redisson(url: &str, name: &str, fenced: bool, lease: std::time::Duration) -> Self {
        let mode = if fenced { "fenced" } else { "plain" };
        let lease = lease.as_millis().to_string();
        Self::node("node-redisson", "redisson.js", &[url, name, mode, &lease]).await
    }

    /// Runs `foreign/{script}` with `args` by `node`, the packages from
    /// `FENCING_NODE_PATH` (default the prefix `integration/services.sh`
    /// installs them in), and waits for its "ready". Fails, naming how to
    /// install them, if node or a package is missing.
    async fn node(what: &'static str, script: &str, args: &[&str]) -> Self {
        let modules = std::env::var_os("FENCING_NODE_PATH").map_or_else(
            || {
                fencing_servers::Paths::from_env()
                    .tools
                    .join(fencing_servers::specs::redis::NODE_LOCKS.prefix)
                    .join("node_modules")
            },
            PathBuf::from,
        );
        let how = "`integration/services.sh up redis-aof` installs node-redlock, node-redisson \
                   and ioredis (and Debian's nodejs), or point FENCING_NODE_PATH at a \
                   node_modules with them";
        for package in ["redlock", "node-redisson", "ioredis"] {
            if !modules.join(package).is_dir() {
                panic!("no {package} in {}: {how}", modules.display());
            }
        }
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("foreign")
            .join(script);
        let mut command = tokio::process::Command::new("node");
        command.env("NODE_PATH", &modules).arg(script).args(args);
        let mut client = Self::spawn(what, command);
        let ready = client.line().await;
        assert_eq!(ready, "ready", "{what}'s first line ({how})");
        client
    }

    fn spawn(what: &'static str, mut command: tokio::process::Command) -> Self {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start the {what} client ({command:?}): {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        Self {
            what,
            child,
            stdin,
            stdout: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
        }
    }

    /// The next line the client prints (bounded: a hung client fails the
    /// test).
    pub async fn line(&mut self) -> String {
        let next =
            tokio::time::timeout(std::time::Duration::from_secs(30), self.stdout.next_line());
        let what = self.what;
        match next.await {
            Ok(Ok(Some(line))) => line,
            Ok(Ok(None)) => {
                let status = self.child.wait().await;
                panic!("the {what} client exited ({status:?}); its error is above")
            }
            Ok(Err(e)) => panic!("read from the {what} client: {e}"),
            Err(_) => panic!("the {what} client said nothing for 30 s"),
        }
    }

    /// Sends `line` to the client.
    pub async fn send(&mut self, line: &str) {
        use tokio::io::AsyncWriteExt;
        let what = self.what;
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap_or_else(|e| panic!("write to the {what} client: {e}"));
        self.stdin.flush().await.expect("flush");
    }

    /// The client's process id, for signals.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }
}
