//! `fence demo`: the Figure 9-6 timeline, narrated.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use fencing::memory::{MemoryIssuer, MemoryStore};
use fencing::{Error, FencedStore, FencingToken, LeaseRequest, TokenIssuer};
use fencing_sql::{SqlIssuer, SqlStore};

#[derive(Debug, Args)]
pub(crate) struct DemoArgs {
    /// The lease's time-to-live; client 1 pauses for 1.5× this.
    #[arg(long, default_value = "300ms", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// Have client 2 fence the file as soon as it acquires, before writing:
    /// the zombie is refused even though client 2 has not written yet.
    #[arg(long)]
    fence_on_acquire: bool,
    /// The SQLite file that plays the lock service and the storage service
    /// (created if missing). Defaults to a fresh file in the temp directory.
    #[arg(long, value_name = "PATH", conflicts_with = "memory")]
    sqlite: Option<PathBuf>,
    /// Use the in-memory issuer and store instead of SQLite.
    #[arg(long)]
    memory: bool,
    /// Also draw this run's timeline as an SVG picture.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

pub(crate) async fn run(args: DemoArgs) -> crate::CliResult {
    let mut scratch = None;
    let (issuer, store, place): (Box<dyn TokenIssuer>, Box<dyn FencedStore>, String) =
        if args.memory {
            (
                Box::new(MemoryIssuer::new()),
                Box::new(MemoryStore::new()),
                "process memory".into(),
            )
        } else {
            let path = args.sqlite.unwrap_or_else(|| {
                let path =
                    std::env::temp_dir().join(format!("fence-demo-{}.sqlite", std::process::id()));
                scratch = Some(path.clone());
                path
            });
            let url = format!("sqlite://{}", path.display());
            let db = fencing_sql::Db::connect(&url).await?;
            (
                Box::new(SqlIssuer::new(db.clone()).await?),
                Box::new(SqlStore::new(db).await?),
                format!("the SQLite file {}", path.display()),
            )
        };
    out!("Figure 9-6 (Kleppmann & Riccomini, DDIA ch. 9), run for real in {place}:");
    out!("a lock service grants leases with fencing tokens; the storage refuses stale tokens.\n");
    let events = figure_9_6(
        &*issuer,
        &*store,
        args.ttl,
        args.fence_on_acquire,
        print_event,
    )
    .await?;
    out!(
        "\nClient 1's lease expired while it was paused, but it never noticed. The lock alone could not\n\
         stop its write; the storage did, because client 2's token was higher."
    );
    if let Some(file) = &args.svg {
        std::fs::write(file, crate::svg::timeline(&events, args.ttl))
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        out!("\nTimeline drawn to {}", file.display());
    }
    if let Some(path) = scratch {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

fn print_event(event: &Event) {
    let at = format!("{:>8.3}s", event.at.as_secs_f64());
    match &event.step {
        Step::Acquired { client, token, ttl } => {
            out!("{at}  client {client}  acquires the lease (TTL {ttl:?})        -> token {token}");
        }
        Step::Paused { client, duration } => {
            out!(
                "{at}  client {client}  pauses for {duration:?} (GC, VM freeze): its lease expires meanwhile"
            );
        }
        Step::Resumed { client } => {
            out!("{at}  client {client}  wakes up, still believing it holds the lease");
        }
        Step::Fenced { client, token } => {
            out!("{at}  client {client}  fences the file at token {token} before writing");
        }
        Step::Wrote {
            client,
            token,
            value,
        } => {
            out!("{at}  client {client}  writes {value:?} with token {token}   -> accepted");
        }
        Step::Refused {
            client,
            presented,
            current,
            error,
        } => {
            out!(
                "{at}  client {client}  writes with token {presented}                    -> REFUSED (store holds {current})"
            );
            out!("{:>11}error: {error}", "");
        }
        Step::Final { value, token } => {
            out!("{at}  store    holds {value:?} at token {token}: client 2's data is intact");
        }
    }
}

/// What happened, in order.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// A client was granted the lease.
    Acquired {
        client: u8,
        token: FencingToken,
        ttl: Duration,
    },
    /// A client stopped (a GC pause, a VM freeze).
    Paused { client: u8, duration: Duration },
    /// A client resumed, still believing it holds the lease.
    Resumed { client: u8 },
    /// A client fenced the file before writing.
    Fenced { client: u8, token: FencingToken },
    /// The store accepted a write.
    Wrote {
        client: u8,
        token: FencingToken,
        value: String,
    },
    /// The store refused a write: the token it carried, the store's mark,
    /// the error as a program sees it.
    Refused {
        client: u8,
        presented: FencingToken,
        current: FencingToken,
        error: String,
    },
    /// The value the store holds at the end, and its mark.
    Final { value: String, token: FencingToken },
}

/// A step and when it happened, from the start of the run.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub(crate) at: Duration,
    pub(crate) step: Step,
}

/// One run of Figure 9-6 with a real pause, through the public traits only:
/// client 1 acquires and sleeps past its TTL, client 2 acquires and writes
/// (or, with `fence_on_acquire`, only fences), client 1 wakes and writes
/// with its old token. `observe` sees each step as it happens. An outcome
/// other than the zombie's refusal is an error naming what went wrong.
async fn figure_9_6(
    issuer: &dyn TokenIssuer,
    store: &dyn FencedStore,
    ttl: Duration,
    fence_on_acquire: bool,
    mut observe: impl FnMut(&Event),
) -> Result<Vec<Event>, Box<dyn std::error::Error>> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let prefix = format!("fence-demo-{}-{run:x}", std::process::id());
    let (resource, key) = (format!("{prefix}/figure-9-6"), format!("{prefix}/file"));
    let started = Instant::now();
    let mut events = Vec::new();
    let mut log = |step: Step| {
        let event = Event {
            at: started.elapsed(),
            step,
        };
        observe(&event);
        events.push(event);
    };
    let wait = ttl * 10 + Duration::from_secs(30);

    let lease1 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl), wait)
        .await?;
    log(Step::Acquired {
        client: 1,
        token: lease1.token(),
        ttl,
    });
    let pause = ttl + ttl / 2;
    log(Step::Paused {
        client: 1,
        duration: pause,
    });
    tokio::time::sleep(pause).await;

    let lease2 = issuer
        .acquire(&LeaseRequest::new(&resource, ttl * 10), wait)
        .await?;
    log(Step::Acquired {
        client: 2,
        token: lease2.token(),
        ttl: ttl * 10,
    });
    let value2 = "written by client 2";
    if fence_on_acquire {
        store.fence(&key, lease2.token()).await?;
        log(Step::Fenced {
            client: 2,
            token: lease2.token(),
        });
    } else {
        store
            .put(&key, Bytes::from_static(value2.as_bytes()), lease2.token())
            .await?;
        log(Step::Wrote {
            client: 2,
            token: lease2.token(),
            value: value2.into(),
        });
    }

    log(Step::Resumed { client: 1 });
    let zombie = store
        .put(
            &key,
            Bytes::from_static(b"written by client 1 (zombie)"),
            lease1.token(),
        )
        .await;
    match zombie {
        Err(
            ref e @ Error::StaleToken {
                presented, current, ..
            },
        ) => log(Step::Refused {
            client: 1,
            presented,
            current,
            error: e.to_string(),
        }),
        other => {
            return Err(format!(
                "{} x {}: the zombie's write with token {} was not refused as stale: {other:?}",
                issuer.name(),
                store.name(),
                lease1.token()
            )
            .into());
        }
    }

    if fence_on_acquire {
        store
            .put(&key, Bytes::from_static(value2.as_bytes()), lease2.token())
            .await?;
        log(Step::Wrote {
            client: 2,
            token: lease2.token(),
            value: value2.into(),
        });
    }
    let stored = store
        .get(&key)
        .await?
        .ok_or("client 2's value is missing from the store")?;
    log(Step::Final {
        value: String::from_utf8_lossy(&stored.value).into_owned(),
        token: stored.token,
    });
    let _ = issuer.release(&lease2).await;
    Ok(events)
}
