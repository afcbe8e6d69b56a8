//! ZooKeeper's files: zoo.cfg (standalone, ensemble member, TLS only),
//! myid, log4j.properties, and the classpath of Debian's jars.

use std::fmt::Write;
use std::net::Ipv4Addr;
use std::path::Path;

use crate::Instance;
use crate::util::write;

/// Debian's ZooKeeper jar (its manifest lists its dependencies).
pub(super) const JAR: &str = "/usr/share/java/zookeeper.jar";

/// Log to the console, which `services` sends to the instance's log.
pub(super) const LOG4J: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} %-5p [%t] %c{1}: %m%n
";

/// The jars under /usr/share/java that are there, as `:`-separated
/// additions to `base`.
fn with_jars(mut base: String, jars: &[&str]) -> String {
    for jar in jars {
        let path = format!("/usr/share/java/{jar}.jar");
        if Path::new(&path).is_file() {
            base.push(':');
            base.push_str(&path);
        }
    }
    base
}

/// Java's classpath for ZooKeeper: the Debian jar plus a log4j binding, if
/// present.
pub fn classpath() -> String {
    with_jars(
        JAR.to_owned(),
        &["slf4j-log4j12", "slf4j-reload4j", "log4j-1.2", "reload4j"],
    )
}

/// The TLS server's classpath. It is ZooKeeper's Netty server (the NIO one
/// has no TLS); the Debian jar's manifest lists netty-handler but not the
/// Netty jars that one needs in turn (ByteToMessageDecoder & co.).
pub fn tls_classpath() -> String {
    with_jars(
        classpath(),
        &[
            "netty-codec",
            "netty-resolver",
            "netty-transport-native-unix-common",
        ],
    )
}

/// A member of an ensemble, as `server.N` lines list it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct QuorumMember {
    pub(super) ip: Ipv4Addr,
    pub(super) quorum: u16,
    pub(super) election: u16,
}

/// zoo.cfg of a plaintext server: standalone without `servers`, else a
/// member of them (`server.1` is the first).
pub(super) fn zoo_cfg(dir: &Path, ip: Ipv4Addr, port: u16, servers: &[QuorumMember]) -> String {
    let mut cfg = format!(
        "\
tickTime=1000
initLimit=10
syncLimit=5
dataDir={data}
clientPort={port}
clientPortAddress={ip}
# srvr/mntr/... are how readiness and leadership are checked
4lw.commands.whitelist=*
# the admin server would take port 8080
admin.enableServer=false
",
        data = dir.join("data").display(),
    );
    for (n, s) in servers.iter().enumerate() {
        let _ = writeln!(cfg, "server.{}={}:{}:{}", n + 1, s.ip, s.quorum, s.election);
    }
    cfg
}

/// zoo.cfg of the TLS server: standalone, TLS only (a secureClientPort and
/// no clientPort). ZooKeeper 3.8 reads PEM key and trust stores; the key
/// store is one file with the certificate and its key (`key_store`).
pub(super) fn tls_cfg(dir: &Path, ip: Ipv4Addr, port: u16, key_store: &Path, ca: &Path) -> String {
    format!(
        "\
tickTime=1000
dataDir={data}
secureClientPort={port}
secureClientPortAddress={ip}
serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory
ssl.keyStore.location={key_store}
ssl.keyStore.type=PEM
ssl.trustStore.location={ca}
ssl.trustStore.type=PEM
# clients log in with digest (addauth digest), which needs nothing here; no client certificates
ssl.clientAuth=none
# srvr over TLS is the readiness probe
4lw.commands.whitelist=*
# the admin server would take port 8080
admin.enableServer=false
",
        data = dir.join("data").display(),
        key_store = key_store.display(),
        ca = ca.display(),
    )
}

/// The ensemble's members from the instance's cluster (quorum and election
/// ports: its first two peer ports); none for a standalone server.
fn quorum(i: &Instance) -> Result<Vec<QuorumMember>, String> {
    i.cluster
        .iter()
        .map(|p| match p.peer_ports[..] {
            [quorum, election, ..] => Ok(QuorumMember {
                ip: p.ip,
                quorum,
                election,
            }),
            _ => Err(format!(
                "{}: a member on {}:{} has no quorum and election ports",
                i.name, p.ip, p.port
            )),
        })
        .collect()
}

/// Writes zoo.cfg, log4j.properties and (in an ensemble) data/myid.
pub(super) fn write_zoo_cfg(i: &Instance) -> Result<(), String> {
    let servers = quorum(i)?;
    make_data_dir(i)?;
    if !servers.is_empty() {
        write(&i.dir.join("data/myid"), &format!("{}\n", i.number))?;
    }
    write(
        &i.dir.join("zoo.cfg"),
        &zoo_cfg(&i.dir, i.ip, i.port, &servers),
    )?;
    write(&i.dir.join("log4j.properties"), LOG4J)
}

/// Writes the TLS server's zoo.cfg, its key store (server.pem and
/// server-key.pem in one file) and log4j.properties.
pub(super) fn write_tls_cfg(i: &Instance) -> Result<(), String> {
    make_data_dir(i)?;
    let read = |name: &str| {
        let path = i.paths.tls_file(name);
        std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "{}: {}: {e} (make the test PKI: integration/services.sh up pki)",
                i.name,
                path.display()
            )
        })
    };
    let bundle = i.dir.join("server-bundle.pem");
    write(&bundle, &(read("server.pem")? + &read("server-key.pem")?))?;
    let ca = i.paths.tls_file("ca.pem");
    write(
        &i.dir.join("zoo.cfg"),
        &tls_cfg(&i.dir, i.ip, i.port, &bundle, &ca),
    )?;
    write(&i.dir.join("log4j.properties"), LOG4J)
}

fn make_data_dir(i: &Instance) -> Result<(), String> {
    let data = i.dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {}: {e}", i.name, data.display()))
}
