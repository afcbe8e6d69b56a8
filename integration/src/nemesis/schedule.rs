//! Seeded fault schedules: the same seed gives the same faults at the same
//! offsets (`FENCING_SEED` replays a run's schedule; what the servers do
//! under it is, of course, theirs).

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// One fault. Members and clients are indices.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// One member cut off from the other two (clients still reach it).
    PartitionMember(usize),
    /// The current leader cut off from the other two.
    PartitionLeader,
    /// A client cut off from every member, but not from the store: the
    /// classic zombie, whose lease expires while it can still write.
    IsolateClient(usize),
    /// A share of the packets between a client and every member dropped.
    LossyClient(usize, f64),
    /// A client's link throttled to this many kbit/s (queueing delay).
    SlowClient(usize, u32),
    /// A client stopped (SIGSTOP) for the step, past its TTL.
    PauseClient(usize),
    /// A member killed (SIGKILL), restarted at the heal.
    KillMember(usize),
    /// The leader killed, restarted at the heal.
    KillLeader,
    /// A member stopped (SIGSTOP) for the step.
    PauseMember(usize),
    /// A client's wall clock set to this offset from real time (seconds);
    /// `all_clocks`: its monotonic clock jumps too.
    ClockJump {
        /// The client.
        client: usize,
        /// The offset from real time, in seconds.
        offset_secs: i64,
        /// Whether the monotonic clock moves too.
        all_clocks: bool,
    },
}

impl Fault {
    /// Its kind, as reports count it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::PartitionMember(_) => "partition-member",
            Self::PartitionLeader => "partition-leader",
            Self::IsolateClient(_) => "isolate-client",
            Self::LossyClient(..) => "lossy-link",
            Self::SlowClient(..) => "slow-link",
            Self::PauseClient(_) => "pause-client",
            Self::KillMember(_) | Self::KillLeader => "kill-member",
            Self::PauseMember(_) => "pause-member",
            Self::ClockJump { .. } => "clock-jump",
        }
    }
}

/// A quiet spell, then faults held together, then a heal.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// How long all is well first.
    pub quiet: Duration,
    /// What breaks.
    pub faults: Vec<Fault>,
    /// How long it stays broken.
    pub hold: Duration,
}

/// What a schedule may use (by default: nothing).
#[derive(Clone, Debug, Default)]
pub struct Menu {
    /// Lock-service members (0: no cluster faults).
    pub members: usize,
    /// Clients.
    pub clients: usize,
    /// The lease TTL: pauses and holds are sized by it.
    pub ttl: Duration,
    /// Network and process faults on the cluster and clients.
    pub cluster_faults: bool,
    /// With no members: faults on the clients' links to the one server that
    /// is issuer and store (isolate, lossy, slow), besides client pauses.
    pub client_links: bool,
    /// Clients whose clock the schedule may jump: (client, all clocks).
    pub jumping_clocks: Vec<(usize, bool)>,
}

/// A random schedule filling `length`, from `seed`.
pub fn random(seed: u64, length: Duration, menu: &Menu) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let ttl_ms = u64::try_from(menu.ttl.as_millis()).unwrap_or(u64::MAX / 4);
    let mut steps = Vec::new();
    let mut total = Duration::ZERO;
    while total < length {
        let quiet = Duration::from_millis(rng.random_range(300..=ttl_ms.max(301)));
        // Past the TTL, so a lease can expire under the fault.
        let hold = Duration::from_millis(rng.random_range(ttl_ms / 2..=ttl_ms * 5 / 2));
        let count = if rng.random_bool(0.3) { 2 } else { 1 };
        let faults = (0..count).filter_map(|_| pick(&mut rng, menu)).collect();
        total += quiet + hold;
        steps.push(Step {
            quiet,
            faults,
            hold,
        });
    }
    steps
}

fn pick(rng: &mut StdRng, menu: &Menu) -> Option<Fault> {
    let client = rng.random_range(0..menu.clients.max(1));
    let mut options: Vec<Fault> = Vec::new();
    if menu.cluster_faults && menu.members > 0 {
        let member = rng.random_range(0..menu.members);
        options.extend([
            Fault::PartitionMember(member),
            Fault::PartitionLeader,
            Fault::IsolateClient(client),
            Fault::IsolateClient(client),
            Fault::LossyClient(client, rng.random_range(0.2..0.6)),
            Fault::SlowClient(client, rng.random_range(16..=128)),
            Fault::PauseClient(client),
            Fault::KillMember(member),
            Fault::KillLeader,
            Fault::PauseMember(member),
        ]);
    } else if menu.cluster_faults && menu.client_links {
        // Isolation twice, as above: the zombie, here one that cannot even
        // write until the heal, when its old token must be refused.
        options.extend([
            Fault::IsolateClient(client),
            Fault::IsolateClient(client),
            Fault::LossyClient(client, rng.random_range(0.2..0.6)),
            Fault::SlowClient(client, rng.random_range(16..=128)),
            Fault::PauseClient(client),
        ]);
    } else if menu.cluster_faults {
        options.push(Fault::PauseClient(client));
    }
    for &(client, all_clocks) in &menu.jumping_clocks {
        // Forward only when the monotonic clock moves: backwards, every
        // timer of the process would wait hours.
        let offset_secs = if all_clocks {
            rng.random_range(600..=3 * 3600)
        } else {
            rng.random_range(-6 * 3600..=6 * 3600)
        };
        options.push(Fault::ClockJump {
            client,
            offset_secs,
            all_clocks,
        });
    }
    if options.is_empty() {
        return None;
    }
    let i = rng.random_range(0..options.len());
    Some(options.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_its_schedule_and_another_seed_differs() {
        let menu = Menu {
            members: 3,
            clients: 4,
            ttl: Duration::from_secs(2),
            cluster_faults: true,
            client_links: false,
            jumping_clocks: vec![(3, false)],
        };
        let a = random(42, Duration::from_secs(60), &menu);
        assert_eq!(a, random(42, Duration::from_secs(60), &menu));
        assert_ne!(a, random(43, Duration::from_secs(60), &menu));
        let total: Duration = a.iter().map(|s| s.quiet + s.hold).sum();
        assert!(total >= Duration::from_secs(60), "{total:?}");
        assert!(a.iter().all(|s| !s.faults.is_empty()));
    }

    #[test]
    fn a_single_server_menu_draws_every_client_fault_and_no_member_fault() {
        let menu = Menu {
            members: 0,
            clients: 4,
            ttl: Duration::from_secs(2),
            cluster_faults: true,
            client_links: true,
            jumping_clocks: Vec::new(),
        };
        let steps = random(7, Duration::from_secs(600), &menu);
        let kinds: std::collections::BTreeSet<&str> = steps
            .iter()
            .flat_map(|s| s.faults.iter().map(Fault::kind))
            .collect();
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            ["isolate-client", "lossy-link", "pause-client", "slow-link"]
        );
    }
}
