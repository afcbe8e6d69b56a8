//! Hosts in network namespaces on one bridge, and the faults between them.
//!
//! Every host is a namespace `fnm<pid><n>-<name>` with one veth leg on the
//! bridge `fnm<pid><n>`; the root namespace keeps `.1` on the bridge, so this
//! process reaches every host and no host reaches anything else. Faults are
//! iptables rules inside the hosts' own namespaces (a partition drops both
//! ways, like Jepsen's), so healing is flushing them. [`Net`]'s drop removes
//! every namespace and the bridge; [`sweep`] removes what a killed run left.

use std::net::Ipv4Addr;
use std::process::Command;

/// Runs `program args`, failing with what it printed.
pub(crate) fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "`{program} {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this machine can build the topology, and if not why: the
/// nemesis needs root, iproute2 and iptables (`integration/services.sh deps`
/// installs the tools).
pub fn preflight() -> Result<(), String> {
    for tool in ["ip", "iptables"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!(
                "the nemesis needs `{tool}`: run `integration/services.sh deps` (Debian iproute2, iptables)"
            ));
        }
    }
    // A name of this process's own, so concurrent probes do not collide
    // and a concurrent sweep leaves it alone.
    let (tag, _) = next_tag();
    let probe = format!("{tag}-probe");
    run("ip", &["netns", "add", &probe]).map_err(|e| {
        format!("the nemesis needs network namespaces, i.e. root (or CAP_NET_ADMIN): {e}")
    })?;
    let _ = run("ip", &["netns", "del", &probe]);
    Ok(())
}

/// The next name of this process's: `fnm<pid><letter>` (interface names
/// stay within Linux's 15 bytes), and the letter's number.
fn next_tag() -> (String, u32) {
    static TAGS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = TAGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 26;
    let letter = char::from(b'a' + u8::try_from(n).expect("below 26"));
    (format!("fnm{}{letter}", std::process::id()), n)
}

/// One host: a namespace with an address on the bridge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// Its short name (`etcd-1`, `client-3`, `postgres`).
    pub name: String,
    /// Its namespace.
    pub ns: String,
    /// Its address on the bridge.
    pub ip: Ipv4Addr,
}

impl Host {
    /// `iptables args` inside this host.
    fn iptables(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", &self.ns, "iptables", "-w"];
        all.extend_from_slice(args);
        run("ip", &all).map(drop)
    }

    /// The command line that runs `program` inside this host.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, program]);
        cmd
    }
}

/// A bridge and the hosts on it. Dropping it removes them.
#[derive(Debug)]
pub struct Net {
    tag: String,
    subnet: [u8; 3],
    hosts: Vec<Host>,
}

impl Net {
    /// A new empty bridge, after sweeping what killed runs left behind.
    pub fn new() -> Result<Self, String> {
        sweep();
        let (tag, n) = next_tag();
        let pid = std::process::id();
        // A subnet per net, so concurrent runs do not collide.
        let byte = |n: u32| u8::try_from(n).expect("below 256");
        let subnet = [10, 200 + byte(pid % 50), byte((pid / 50 + n * 37) % 250)];
        let net = Self {
            tag,
            subnet,
            hosts: Vec::new(),
        };
        run("ip", &["link", "add", &net.tag, "type", "bridge"])?;
        run("ip", &["link", "set", &net.tag, "up"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/24", net.gateway()),
                "dev",
                &net.tag,
            ],
        )?;
        Ok(net)
    }

    /// The root namespace's address on the bridge.
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// Adds a host named `name` (its namespace, veth pair and address).
    pub fn add_host(&mut self, name: &str) -> Result<Host, String> {
        let n = self.hosts.len() + 2;
        let [a, b, c] = self.subnet;
        let host = Host {
            name: name.to_owned(),
            ns: format!("{}-{name}", self.tag),
            ip: Ipv4Addr::new(a, b, c, u8::try_from(n).map_err(|_| "over 250 hosts")?),
        };
        let leg = format!("{}v{n}", self.tag);
        run("ip", &["netns", "add", &host.ns])?;
        // Registered before the links, so a failure below still removes it.
        self.hosts.push(host.clone());
        run(
            "ip",
            &[
                "link", "add", &leg, "type", "veth", "peer", "name", "eth0", "netns", &host.ns,
            ],
        )?;
        run("ip", &["link", "set", &leg, "master", &self.tag, "up"])?;
        let ns = |args: &[&str]| {
            let mut all = vec!["-n", host.ns.as_str()];
            all.extend_from_slice(args);
            run("ip", &all).map(drop)
        };
        ns(&["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"])?;
        ns(&["link", "set", "eth0", "up"])?;
        ns(&["link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// Cuts `a` off from `b` both ways: packets are dropped, not refused,
    /// so connections hang as they do behind a failed switch.
    pub fn partition(&self, a: &Host, b: &Host) -> Result<(), String> {
        for (me, other) in [(a, b), (b, a)] {
            let ip = other.ip.to_string();
            me.iptables(&["-A", "INPUT", "-s", &ip, "-j", "DROP"])?;
            me.iptables(&["-A", "OUTPUT", "-d", &ip, "-j", "DROP"])?;
        }
        Ok(())
    }

    /// Drops a share `loss` (0..1) of the packets between `a` and `b`.
    pub fn lossy(&self, a: &Host, b: &Host, loss: f64) -> Result<(), String> {
        let p = format!("{loss:.3}");
        for (me, other) in [(a, b), (b, a)] {
            let ip = other.ip.to_string();
            let rule = |chain: &str, dir: &str| {
                me.iptables(&[
                    "-A",
                    chain,
                    dir,
                    &ip,
                    "-m",
                    "statistic",
                    "--mode",
                    "random",
                    "--probability",
                    &p,
                    "-j",
                    "DROP",
                ])
            };
            rule("INPUT", "-s")?;
            rule("OUTPUT", "-d")?;
        }
        Ok(())
    }

    /// Throttles everything `host` sends to `kbit` kbit/s with a deep
    /// queue (tbf): packets wait up to seconds. This kernel has no netem, so
    /// this is the delay a nemesis can add: queueing, not a fixed latency.
    pub fn throttle(&self, host: &Host, kbit: u32) -> Result<(), String> {
        let rate = format!("{kbit}kbit");
        let args = [
            "-n", &host.ns, "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate", &rate,
            "burst", "4kb", "latency", "3s",
        ];
        run("tc", &args).map(drop)
    }

    /// Removes every partition, lossy link and throttle.
    pub fn heal(&self) -> Result<(), String> {
        for host in &self.hosts {
            host.iptables(&["-F"])?;
            // Fails when there is no throttle to remove: nothing to heal.
            let _ = run(
                "tc",
                &["-n", &host.ns, "qdisc", "del", "dev", "eth0", "root"],
            );
        }
        Ok(())
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for host in &self.hosts {
            remove_namespace(&host.ns);
        }
        let _ = run("ip", &["link", "del", &self.tag]);
    }
}

/// Kills what still runs in `ns` and deletes it (its veth leg goes with it).
fn remove_namespace(ns: &str) {
    if let Ok(pids) = run("ip", &["netns", "pids", ns]) {
        for pid in pids.split_whitespace() {
            let _ = run("kill", &["-9", pid]);
        }
    }
    let _ = run("ip", &["netns", "del", ns]);
}

/// Removes the namespaces and bridges of nemesis runs whose process is gone
/// (a run killed before its drop could clean up).
pub fn sweep() {
    let alive = |tag: &str| {
        tag.strip_prefix("fnm")
            .map(|rest| rest.trim_end_matches(|c: char| c.is_ascii_lowercase()))
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists())
    };
    if let Ok(list) = run("ip", &["netns", "list"]) {
        for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
            if let Some((tag, _)) = ns.split_once('-')
                && tag.starts_with("fnm")
                && !alive(tag)
            {
                remove_namespace(ns);
            }
        }
    }
    if let Ok(links) = run("ip", &["-o", "link", "show", "type", "bridge"]) {
        for name in links.lines().filter_map(|l| l.split(": ").nth(1)) {
            let name = name.split('@').next().unwrap_or(name);
            if name.starts_with("fnm") && !alive(name) {
                let _ = run("ip", &["link", "del", name]);
            }
        }
    }
}
