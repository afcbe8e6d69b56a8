//! `fence doctor`: prove that a deployment enforces what fencing needs
//! (contract clause 12). Runs `FencedStore::verify` and `TokenIssuer::verify`
//! on each URL and prints every check.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use fencing_tokens::Error;
use fencing_tokens::safety::{SafetyCheck, Verdict};
use serde::Serialize;

use crate::{CliResult, backends, exit};
use fencing_tokens::redact;

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Stores and issuers to check, by URL (default: $FENCE_STORE and
    /// $FENCE_ISSUER). A SQL URL is both: its store and issuer checks both run.
    #[arg(value_name = "URL")]
    urls: Vec<String>,
    /// Give up on one URL's checks after this long (a server that does not
    /// answer counts as "could not run").
    #[arg(long, default_value = "60s", value_parser = crate::parse_duration)]
    timeout: Duration,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What a URL is checked as.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
enum Role {
    Store,
    Issuer,
    /// Neither: a scheme `fence` does not know.
    Unknown,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Issuer => "issuer",
            Self::Unknown => "unknown scheme",
        }
    }
}

#[derive(Debug, Serialize)]
struct CheckView {
    verdict: &'static str,
    name: String,
    detail: String,
}

impl From<SafetyCheck> for CheckView {
    fn from(c: SafetyCheck) -> Self {
        Self {
            verdict: verdict_word(c.verdict),
            name: c.name,
            detail: c.detail,
        }
    }
}

fn verdict_word(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Warn => "warn",
        Verdict::Unsafe => "unsafe",
    }
}

/// One role's checks on one URL, or why they could not run.
#[derive(Debug, Serialize)]
struct Section {
    role: Role,
    checks: Vec<CheckView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// Whether the error was bad input (a malformed URL) rather than a
    /// server that could not be reached.
    #[serde(skip)]
    invalid: bool,
}

impl Section {
    fn count(&self, verdict: &str) -> usize {
        self.checks.iter().filter(|c| c.verdict == verdict).count()
    }
}

/// Every check on one URL, and the verdict.
#[derive(Debug, Serialize)]
struct Report {
    url: String,
    /// `safe`, `warn`, `unsafe` or `error` (a check could not run).
    verdict: &'static str,
    summary: String,
    sections: Vec<Section>,
}

pub(crate) async fn run(args: DoctorArgs) -> CliResult {
    let mut urls = args.urls;
    if urls.is_empty() {
        urls.extend(
            ["FENCE_STORE", "FENCE_ISSUER"]
                .iter()
                .filter_map(|v| std::env::var(v).ok())
                .filter(|u| !u.is_empty()),
        );
        urls.dedup();
    }
    if urls.is_empty() {
        return Err(Error::invalid_input(
            "fence doctor needs at least one store or issuer URL (or FENCE_STORE / FENCE_ISSUER)",
        )
        .into());
    }
    let mut reports = Vec::new();
    for url in &urls {
        let report = check_url(url, args.timeout, !args.json).await;
        if !args.json {
            out!("{}: {}", report.url, report.summary);
        }
        for s in report.sections.iter().filter(|s| s.error.is_some()) {
            eprintln!(
                "fence doctor: could not check {} ({})",
                report.url,
                s.role.as_str()
            );
        }
        reports.push(report);
    }
    let unsafe_ = reports.iter().any(|r| r.verdict == "unsafe");
    let failed = reports
        .iter()
        .flat_map(|r| &r.sections)
        .filter(|s| s.error.is_some());
    let (mut any_failed, mut all_invalid) = (false, true);
    for s in failed {
        any_failed = true;
        all_invalid &= s.invalid;
    }
    if args.json {
        out!(
            "{}",
            serde_json::json!({"safe": !unsafe_ && !any_failed, "urls": reports})
        );
    }
    // An unsafe finding is the answer even if another URL could not be checked.
    let code = if unsafe_ {
        exit::UNSAFE
    } else if any_failed && all_invalid {
        exit::INVALID
    } else if any_failed {
        exit::FAILURE
    } else {
        0
    };
    Ok(ExitCode::from(code))
}

/// Runs the store and/or issuer checks on `url`, printing each as it comes
/// (`print`), and judges the URL.
async fn check_url(url: &str, timeout: Duration, print: bool) -> Report {
    let shown = redact(url);
    let backend = backends::backend_for(url);
    let opens = |role| backend.is_some_and(|b| b.opens(role));
    let (store, issuer) = (opens(backends::Role::Store), opens(backends::Role::Issuer));
    let mut sections = Vec::new();
    if !store && !issuer {
        let error = format!(
            "not a store or issuer URL; expected a store:\n{}\nor an issuer:\n{}",
            backends::grammar(backends::Role::Store),
            backends::grammar(backends::Role::Issuer)
        );
        if print {
            out!("{shown}");
            out!("  ERROR   {error}");
        }
        sections.push(Section {
            role: Role::Unknown,
            checks: Vec::new(),
            error: Some(error),
            invalid: true,
        });
    }
    let roles = [(store, Role::Store), (issuer, Role::Issuer)];
    for role in roles.into_iter().filter(|(on, _)| *on).map(|(_, r)| r) {
        if print {
            out!("{shown} ({})", role.as_str());
        }
        let outcome = tokio::time::timeout(timeout, checks(url, role)).await;
        let section = match outcome {
            Ok(Ok(checks)) => Section {
                role,
                checks: checks.into_iter().map(CheckView::from).collect(),
                error: None,
                invalid: false,
            },
            Ok(Err(e)) => Section {
                role,
                checks: Vec::new(),
                invalid: matches!(e, Error::InvalidInput { .. }),
                error: Some(describe(&e)),
            },
            Err(_) => Section {
                role,
                checks: Vec::new(),
                error: Some(format!(
                    "no answer within {} (raise --timeout, or check that the server is up)",
                    humantime::format_duration(timeout)
                )),
                invalid: false,
            },
        };
        if print {
            for c in &section.checks {
                let verdict = if c.verdict == "unsafe" {
                    "UNSAFE"
                } else {
                    c.verdict
                };
                out!("  {verdict:<6}  {}: {}", c.name, c.detail);
            }
            if let Some(e) = &section.error {
                out!("  ERROR   could not run the {} checks: {e}", role.as_str());
            }
        }
        sections.push(section);
    }
    judge(shown, sections)
}

/// The store or issuer checks, or the error that kept them from running.
async fn checks(url: &str, role: Role) -> Result<Vec<SafetyCheck>, Error> {
    match role {
        Role::Store => backends::open_store(url).await?.verify().await,
        Role::Issuer => match backends::open_issuer(url).await {
            Ok(issuer) => issuer.verify().await,
            // A Redis issuer refuses to open on a server that can lose its
            // counter. That refusal is the finding: say so, then open it
            // anyway (volatile=1, only to look) to list every setting.
            Err(Error::UnsafeConfiguration { reason, .. }) => {
                let Some(inspect) = with_volatile(url) else {
                    return Ok(vec![SafetyCheck::unsafe_(
                        "opens without an opt-in",
                        reason,
                    )]);
                };
                let refused = SafetyCheck::unsafe_(
                    "opens without an opt-in",
                    "fence refuses to take leases from this server unless the URL says ?volatile=1 \
                     (the checks below say why; they ran with that opt-in, only to look)",
                );
                let mut all = vec![refused];
                all.extend(
                    backends::open_issuer(&inspect)
                        .await?
                        .verify()
                        .await?
                        .into_iter()
                        .map(|mut c| {
                            // The checks ran with the opt-in only to look.
                            c.detail = c.detail.replace(
                                " (accepted: this issuer was opened with Durability::AcceptVolatileCounter)",
                                "",
                            );
                            c
                        }),
                );
                Ok(all)
            }
            Err(e) => Err(e),
        },
        Role::Unknown => Err(Error::invalid_input(format!(
            "{:?} is not a store or issuer URL",
            redact(url)
        ))),
    }
}

/// The Redis URL with `volatile=true` in place of any durability option,
/// to open an issuer the registry refused and list its settings.
fn with_volatile(url: &str) -> Option<String> {
    let redis = backends::backend_for(url).is_some_and(|b| b.name == "redis");
    redis.then(|| {
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut pairs: Vec<&str> = query
            .split('&')
            .filter(|p| {
                let key = p.split_once('=').map_or(*p, |(k, _)| k);
                !p.is_empty() && !matches!(key, "volatile" | "replicas" | "wait")
            })
            .collect();
        pairs.push("volatile=true");
        format!("{base}?{}", pairs.join("&"))
    })
}

/// The verdict of one URL from its sections.
fn judge(url: String, sections: Vec<Section>) -> Report {
    let count = |v: &str| sections.iter().map(|s| s.count(v)).sum::<usize>();
    let (unsafe_, warn, total) = (
        count("unsafe"),
        count("warn"),
        sections.iter().map(|s| s.checks.len()).sum::<usize>(),
    );
    let failed: Vec<&str> = sections
        .iter()
        .filter(|s| s.error.is_some())
        .map(|s| s.role.as_str())
        .collect();
    if sections.iter().any(|s| matches!(s.role, Role::Unknown)) {
        return Report {
            url,
            verdict: "error",
            summary: "COULD NOT CHECK: not a store or issuer URL".to_owned(),
            sections,
        };
    }
    let not_run = if failed.is_empty() {
        String::new()
    } else {
        format!("; the {} checks could not run", failed.join(" and "))
    };
    let (verdict, summary) = if unsafe_ > 0 {
        let names: Vec<&str> = sections
            .iter()
            .flat_map(|s| &s.checks)
            .filter(|c| c.verdict == "unsafe")
            .map(|c| c.name.as_str())
            .collect();
        (
            "unsafe",
            format!(
                "UNSAFE: {unsafe_} of {total} checks failed ({}); do not fence on this deployment{not_run}",
                names.join("; ")
            ),
        )
    } else if !failed.is_empty() {
        let ran = if total > 0 {
            format!(" ({total} other checks passed)")
        } else {
            String::new()
        };
        (
            "error",
            format!(
                "COULD NOT CHECK: the {} checks could not run{ran}",
                failed.join(" and ")
            ),
        )
    } else if warn > 0 {
        (
            "warn",
            format!("safe, with {warn} warning(s) ({total} checks)"),
        )
    } else {
        ("safe", format!("safe: all {total} checks passed"))
    };
    Report {
        url,
        verdict,
        summary,
        sections,
    }
}

/// An error and its causes on one line, with a hint when nothing answered.
fn describe(e: &Error) -> String {
    let mut text = e.chain();
    if matches!(
        e,
        Error::Backend {
            retryable: true,
            ..
        } | Error::Timeout { .. }
    ) {
        text.push_str(" (is the server up and reachable at that address?)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::with_volatile;

    #[test]
    fn a_redis_url_is_inspected_with_the_volatile_opt_in_only() {
        assert_eq!(
            with_volatile("redis://h:1?volatile=0&prefix=p").as_deref(),
            Some("redis://h:1?prefix=p&volatile=true")
        );
        assert_eq!(
            with_volatile("rediss://h:1?replicas=1&wait=1s").as_deref(),
            Some("rediss://h:1?volatile=true")
        );
        assert_eq!(with_volatile("s3://b"), None);
    }
}
