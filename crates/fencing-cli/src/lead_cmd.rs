//! `lead`: run a long-lived command as the elected leader of a resource;
//! followers wait and take over.

use std::time::Duration;

use clap::Args;
use fencing_tokens::election::Election;
use fencing_tokens::{Error, redact};

use crate::group::{
    Ended, Held, Interrupts, Outcome, StatusFile, Supervision, spawn_with_lease, supervise,
};
use crate::lease_cmds::Target;
use crate::{CliResult, backends};

#[derive(Debug, Args)]
pub(crate) struct LeadArgs {
    #[command(flatten)]
    target: Target,
    /// How long a term lives without renewal; `fence` renews it every third
    /// of this while the command runs, and a follower takes over this long
    /// after the leader stops renewing.
    #[arg(long, default_value = "30s", value_parser = crate::parse_duration)]
    ttl: Duration,
    /// This candidate's name, shown to the others (default: host and pid).
    #[arg(long, value_name = "ID")]
    candidate: Option<String>,
    /// On winning, raise KEY's mark in the store at STORE_URL to the new
    /// term's token before the command starts, so the last leader's late
    /// writes to it are refused. Repeatable.
    #[arg(long = "fence", value_name = "STORE_URL#KEY", value_parser = StoreKey)]
    fences: Vec<(String, String)>,
    #[command(flatten)]
    supervision: Supervision,
    #[command(flatten)]
    status_file: StatusFile,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// `STORE_URL#KEY`, split at the last `#`. The error shows the value
/// redacted: it is a URL, and may carry a password.
fn parse_fence(s: &str) -> Result<(String, String), String> {
    match s.rsplit_once('#') {
        Some((url, key)) if !url.is_empty() && !key.is_empty() => {
            Ok((url.to_owned(), key.to_owned()))
        }
        _ => Err(format!(
            "expected STORE_URL#KEY (e.g. postgres://…/db#jobs/state), got {:?}",
            redact(s)
        )),
    }
}

/// `--fence`'s parser: [`parse_fence`], whose error clap prints as it is.
/// A plain function parser would have clap echo the raw value beside it.
#[derive(Clone, Copy, Debug)]
struct StoreKey;

impl clap::builder::TypedValueParser for StoreKey {
    type Value = (String, String);

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Self::Value, clap::Error> {
        let fail = |why: String| {
            let arg = arg.map_or_else(|| "--fence".to_owned(), ToString::to_string);
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("invalid value for '{arg}': {why}\n"),
            )
            .with_cmd(cmd)
        };
        let value = value.to_str().ok_or_else(|| fail("not UTF-8".to_owned()))?;
        parse_fence(value).map_err(fail)
    }
}

/// Stands for leader, waits as long as it takes, then runs the command
/// with the term's token until it and the rest of its process group end
/// (exit: its code) or the term is lost (the group is ended; exit 122), or
/// fence gets a terminating signal (the group is ended; exit 128 + it).
/// `--status-file` gets whose exit code fence exits with, whichever way.
pub(crate) async fn lead(args: LeadArgs) -> CliResult {
    args.status_file.around(lead_a_term(&args)).await
}

/// [`lead`], but for the status file.
async fn lead_a_term(args: &LeadArgs) -> Result<Outcome, Box<dyn std::error::Error>> {
    let issuer = backends::open_issuer(&args.target.issuer).await?;
    let candidate = args.candidate.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "host".to_owned());
        format!("{host}:{}", std::process::id())
    });
    let mut election = Election::new(issuer.clone(), &args.target.resource, &candidate, args.ttl);
    for (url, key) in &args.fences {
        election = election.fence_on_takeover(backends::open_store(url).await?, key);
    }

    if let Ok(Some(leader)) = election.leader().await {
        eprintln!(
            "fence: {candidate} waiting to lead {:?}; {leader} leads",
            args.target.resource
        );
    }
    let leadership = election.campaign().await?;
    let lease = leadership.lease();
    eprintln!(
        "fence: {candidate} leads {:?} with token {}{}",
        lease.resource(),
        lease.token(),
        if args.fences.is_empty() {
            String::new()
        } else {
            format!(" (fenced {} key(s))", args.fences.len())
        }
    );

    // Before the command starts, as in `run`.
    let mut interrupts = Interrupts::listen()?;
    let mut leader = match spawn_with_lease(&args.command, &lease, &args.target.issuer) {
        Ok(leader) => leader,
        Err(code) => {
            let _ = leadership.resign().await;
            return Ok(Outcome::fence(code));
        }
    };
    let term = || (!leadership.is_lost()).then(|| leadership.lease());
    let held = Held {
        issuer: &*issuer,
        lease: &term,
    };
    let ended = supervise(
        &mut leader,
        leadership.lost(),
        &args.supervision,
        &mut interrupts,
        &held,
    )
    .await?;
    if !matches!(ended, Ended::Lost) {
        match leadership.resign().await {
            Ok(()) => eprintln!("fence: resigned"),
            Err(e @ Error::LeaseLost { .. }) => eprintln!("fence: {e}"),
            Err(e) => eprintln!("fence: resign after the command finished: {e}"),
        }
    }
    Ok(ended.outcome())
}

#[cfg(test)]
mod tests {
    use super::parse_fence;

    #[test]
    fn fences_split_at_the_last_hash() {
        assert_eq!(
            parse_fence("sqlite:///tmp/x.db#jobs/state"),
            Ok(("sqlite:///tmp/x.db".to_owned(), "jobs/state".to_owned()))
        );
        assert_eq!(
            parse_fence("s3://b?a=1#x#k").unwrap(),
            ("s3://b?a=1#x".to_owned(), "k".to_owned())
        );
        for bad in ["no-key", "#k", "url#"] {
            assert!(parse_fence(bad).is_err(), "{bad}");
        }
    }
}
