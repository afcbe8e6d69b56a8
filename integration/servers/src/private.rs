//! A test's own servers: every member of a service started from its spec
//! on free ports, under a state directory of their own, killed and
//! removed when dropped. For the tests that must reconfigure, kill or
//! restart a server the other tests share; never on the standard ports the
//! running servers hold.
//!
//! ```no_run
//! use fencing_servers::{Private, REDIS_AOF, service};
//!
//! let aof = service("redis-aof").unwrap();
//! // redis-aof's command line, then `--maxmemory-policy allkeys-lru`.
//! let redis = Private::start(aof, &["--maxmemory-policy", "allkeys-lru"]).unwrap();
//! let url = redis.endpoint(&REDIS_AOF); // redis://127.0.0.1:<its port>
//! # let _ = url;
//! ```

mod member;
#[cfg(test)]
pub(crate) mod standard;
mod state;

use std::net::{Ipv4Addr, TcpListener};
use std::time::{Duration, Instant};

pub use state::PrivateState;

use crate::{Instance, Member, Paths, Peer, Server, Service};
use member::{NoAnswer, Running};

/// How long a member may take to answer: JVMs on a busy two-core machine,
/// initdb and mariadb-install-db before the server listens.
const ANSWER_WITHIN: Duration = Duration::from_secs(120);
/// Starts with new ports after a member exited before answering: a port
/// the kernel just handed out and took back can be taken by someone else
/// before the server binds it.
const TRIES: usize = 5;
/// How long a stopped member gets before SIGKILL (an etcd member without
/// quorum needs more than 10 s to give up on its peers).
const GRACE: Duration = Duration::from_secs(15);

/// A private server: every member of a service (one for a single server,
/// the whole cluster for a cluster) on free ports of its own, each killed
/// when dropped, then its state directory removed.
#[derive(Debug)]
pub struct Private {
    /// The spec with its members on the private ports (leaked: a test's
    /// lifetime), which set-ups and cluster operations read.
    service: Service,
    members: Vec<Running>,
    extra: Vec<String>,
    // Dropped after the members are stopped (see Drop).
    state: PrivateState,
}

/// How a [`Private`] server is started; [`Private::build`] makes one.
#[derive(Debug)]
#[must_use]
pub struct PrivateBuilder {
    service: Service,
    extra: Vec<String>,
    ip: Ipv4Addr,
    own_pki: bool,
    state: Option<PrivateState>,
}

impl PrivateBuilder {
    /// Arguments after the spec's own: a later option wins for the servers
    /// here (redis-server, etcd, postgres' `-c`), so they override the
    /// spec's. Not for a server whose spec ends with a script's argument
    /// list (moto's launcher, whose arguments are positional).
    pub fn args<I, S>(mut self, extra: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra.extend(extra.into_iter().map(Into::into));
        self
    }

    /// Listens on `ip` (another loopback address, say) instead of
    /// 127.0.0.1.
    pub fn on(mut self, ip: Ipv4Addr) -> Self {
        self.ip = ip;
        self
    }

    /// A test PKI of its own (made by [`crate::specs::pki::ensure`] in its
    /// state directory) instead of the checkout's.
    pub fn own_pki(mut self) -> Self {
        self.own_pki = true;
        self
    }

    /// In `state`, used as it is (its PKI included: its own, empty until
    /// [`PrivateState::make_pki`], unless [`own_pki`](Self::own_pki)).
    pub fn in_state(mut self, state: PrivateState) -> Self {
        self.state = Some(state);
        self
    }

    /// Starts every member and waits until each answers its probe (the
    /// set-up is not run: see [`Private::setup`]).
    ///
    /// # Errors
    /// A state directory or PKI that cannot be made, a program that
    /// cannot start (naming the `services.sh deps` command that installs
    /// it), a member that does not answer within 120 s (with the end of
    /// its log), or one that exits before answering five times over.
    pub fn start(self) -> Result<Private, String> {
        let Self {
            service,
            extra,
            ip,
            own_pki,
            state,
        } = self;
        if service.members.is_empty() {
            return Err(format!("{} runs no process", service.name));
        }
        let state = match state {
            Some(state) => state,
            None => {
                let mut state = PrivateState::new(service.name)?;
                if !own_pki {
                    state.use_checkout_pki();
                }
                state
            }
        };
        if own_pki {
            state.make_pki()?;
        }
        let (laid_out, members) = layout(&service, ip, state.paths())?;
        let mut private = Private {
            service: laid_out,
            members,
            extra,
            state,
        };
        for attempt in 1..=TRIES {
            match private.start_all() {
                Ok(()) => return Ok(private),
                Err(NoAnswer::Exited(_)) if attempt < TRIES => {
                    // Again on new ports, from empty data directories.
                    private.kill_all();
                    for m in &private.members {
                        let _ = std::fs::remove_dir_all(&m.instance.dir);
                    }
                    let (laid_out, members) = layout(&service, ip, private.paths())?;
                    private.service = laid_out;
                    private.members = members;
                }
                Err(e) => return Err(e.message()),
            }
        }
        Err(format!("a private {}: no tries left", service.name))
    }
}

impl Private {
    /// Starts every member of `service` on free ports of 127.0.0.1, with
    /// the checkout's test PKI and `extra` arguments after the spec's own
    /// (see [`PrivateBuilder::args`]), and waits until each answers.
    ///
    /// # Errors
    /// As [`PrivateBuilder::start`].
    pub fn start(service: &Service, extra: &[&str]) -> Result<Self, String> {
        Self::build(service).args(extra.iter().copied()).start()
    }

    /// A private `service`, to be configured, then started.
    pub fn build(service: &Service) -> PrivateBuilder {
        PrivateBuilder {
            service: *service,
            extra: Vec::new(),
            ip: Ipv4Addr::LOCALHOST,
            own_pki: false,
            state: None,
        }
    }

    /// Spawns every member, then waits for each: the members of a
    /// cluster boot in parallel, and find each other.
    fn start_all(&mut self) -> Result<(), NoAnswer> {
        for m in &mut self.members {
            m.spawn(&self.service, &self.extra)
                .map_err(NoAnswer::NotStarted)?;
        }
        for m in &mut self.members {
            m.wait_answering(&self.service, ANSWER_WITHIN)?;
        }
        Ok(())
    }

    fn kill_all(&mut self) {
        for m in &mut self.members {
            m.kill();
        }
    }

    /// The first member's client port.
    pub fn port(&self) -> u16 {
        self.members[0].instance.port
    }

    /// The first member as started (ports, directory, paths).
    pub fn instance(&self) -> &Instance {
        &self.members[0].instance
    }

    /// Member `n` (from 0) as started.
    ///
    /// # Panics
    /// When the service has no member `n`.
    pub fn member(&self, n: usize) -> &Instance {
        &self.members[n].instance
    }

    /// Every member's address and client port, in order.
    pub fn endpoints(&self) -> Vec<(Ipv4Addr, u16)> {
        self.members
            .iter()
            .map(|m| (m.instance.ip, m.instance.port))
            .collect()
    }

    /// `server`'s endpoint form filled with the first member's port: the
    /// URL the tests would use for the shared server, pointed here.
    pub fn endpoint(&self, server: &Server) -> String {
        server.endpoint_at(self.port())
    }

    /// The spec with its members on the private ports: what set-ups and
    /// cluster operations read.
    pub fn service(&self) -> &Service {
        &self.service
    }

    /// Its state directory's paths (logs, data, the PKI it uses).
    pub fn paths(&self) -> &Paths {
        self.state.paths()
    }

    /// Runs the service's set-up (accounts, buckets, the replica
    /// following its primary) on the private members; nothing if it has
    /// none.
    ///
    /// # Errors
    /// What the set-up returns.
    pub fn setup(&self) -> Result<(), String> {
        match self.service.setup {
            Some(setup) => setup(self.paths(), &self.service),
            None => Ok(()),
        }
    }

    /// Whether member `n`'s probe answers now.
    pub fn answers(&self, n: usize) -> bool {
        (self.service.probe)(&self.members[n].instance)
    }

    /// Kills member `n` at once (SIGKILL), as a crash would.
    pub fn kill(&mut self, n: usize) {
        self.members[n].kill();
    }

    /// Stops member `n` as `services down` would (its stop signal, SIGKILL
    /// after 15 s); its data stays, for [`restart`](Self::restart).
    pub fn stop(&mut self, n: usize) {
        let stop = self.service.stop;
        self.members[n].stop(stop, GRACE);
    }

    /// Starts member `n` again (after [`kill`](Self::kill) or
    /// [`stop`](Self::stop)) on the same ports and data, and waits until it
    /// answers (a cluster member: once it has rejoined a majority).
    ///
    /// # Errors
    /// When it is still running, cannot start, or does not answer within
    /// 120 s (with the end of its log).
    pub fn restart(&mut self, n: usize) -> Result<(), String> {
        let member = &mut self.members[n];
        if member.running() {
            return Err(format!(
                "{} on 127.0.0.1:{} still runs; kill or stop it first",
                member.instance.name, member.instance.port
            ));
        }
        member.spawn(&self.service, &self.extra)?;
        member
            .wait_answering(&self.service, ANSWER_WITHIN)
            .map_err(NoAnswer::message)
    }

    /// Waits up to 120 s until `holds` holds.
    ///
    /// # Errors
    /// `what` and the end of every member's log when it does not.
    pub fn wait_until(&self, what: &str, holds: impl Fn(&Self) -> bool) -> Result<(), String> {
        let started = Instant::now();
        while !holds(self) {
            if started.elapsed() >= ANSWER_WITHIN {
                let logs: Vec<String> = self
                    .members
                    .iter()
                    .map(|m| format!("--- {}: {}", m.instance.name, m.log_tail()))
                    .collect();
                return Err(format!(
                    "a private {}: {what} within {ANSWER_WITHIN:?}\n{}",
                    self.service.name,
                    logs.join("\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    }

    /// The end of the first member's log.
    pub fn log_tail(&self) -> String {
        self.members[0].log_tail()
    }

    /// The end of member `n`'s log.
    pub fn log_tail_of(&self, n: usize) -> String {
        self.members[n].log_tail()
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        // Killed, not stopped: their data goes with the state directory,
        // so no shutdown is owed, and one can take long (a Redis replica
        // that is still syncing waits out the whole grace period).
        // The members first: the state directory holds their data.
        self.kill_all();
    }
}

/// `service` with its members on fresh free ports of `ip`, and those
/// members, not started, their data directories made under `paths`.
fn layout(
    service: &Service,
    ip: Ipv4Addr,
    paths: &Paths,
) -> Result<(Service, Vec<Running>), String> {
    let mut peers = Vec::new();
    for member in service.members {
        let peer_ports = member
            .peer_ports
            .iter()
            .map(|_| free_port())
            .collect::<Result<Vec<u16>, String>>()?;
        peers.push(Peer {
            ip,
            port: free_port()?,
            peer_ports,
        });
    }
    // Leaked: a test's lifetime, a few bytes a server.
    let members: Vec<Member> = service
        .members
        .iter()
        .zip(&peers)
        .map(|(m, p)| Member {
            instance: m.instance,
            port: p.port,
            peer_ports: Box::leak(p.peer_ports.clone().into_boxed_slice()),
        })
        .collect();
    let service = Service {
        members: Box::leak(members.into_boxed_slice()),
        ..*service
    };
    // Every member of a cluster knows the others, as `services` starts them.
    let cluster = if peers.len() > 1 {
        peers.clone()
    } else {
        Vec::new()
    };
    let mut running = Vec::new();
    for (n, (member, peer)) in service.members.iter().zip(peers).enumerate() {
        running.push(Running::new(Instance {
            name: member.instance.to_owned(),
            number: n + 1,
            ip: peer.ip,
            port: peer.port,
            peer_ports: peer.peer_ports,
            cluster: cluster.clone(),
            dir: paths.data.join(member.instance),
            paths: paths.clone(),
        })?);
    }
    Ok((service, running))
}

/// A port of 127.0.0.1 nothing listens on now.
pub(crate) fn free_port() -> Result<u16, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free loopback port: {e}"))
}
