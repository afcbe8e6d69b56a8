//! The Python rows: a `fencing` lock against redis-py's and kazoo's, and a
//! fenced put against a plain psycopg upsert, on the same servers,
//! interleaved by `python/peers.py` in a Python that has the wheel
//! (`FENCING_PYTHON`, else the venv `integration/python.sh` leaves in the
//! target directory).

use std::path::PathBuf;
use std::time::Duration;

use fencing_harness::env;
use serde::Deserialize;
use tokio::process::Command;

use crate::BoxResult;
use crate::measure::Row;
use crate::suite::{Output, Plan};

/// What `peers.py` prints.
#[derive(Deserialize)]
struct Answer {
    python: String,
    rows: Vec<Measured>,
}

#[derive(Deserialize)]
struct Measured {
    backend: String,
    operation: String,
    fenced: Vec<f64>,
    plain: Vec<f64>,
    payload: Option<usize>,
    notes: String,
}

/// Above this, the issue asks why: the findings say.
const EXPLAIN_ABOVE: f64 = 1.5;

fn python() -> BoxResult<PathBuf> {
    if let Ok(python) = std::env::var("FENCING_PYTHON") {
        return Ok(python.into());
    }
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let venv = target.join("python-venv/bin/python");
    if venv.exists() {
        return Ok(venv);
    }
    Err(format!(
        "no Python with the fencing wheel: run integration/python.sh (it leaves {}), or set FENCING_PYTHON",
        venv.display()
    )
    .into())
}

pub(crate) async fn run(plan: &Plan, out: &mut Output) -> BoxResult<()> {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/peers.py");
    let mut command = Command::new(python()?);
    // The endpoints as the Rust rows find them (the variable, else the
    // spec's default port): CI runs the bench without `services.sh env`.
    for server in [&env::REDIS_AOF, &env::ZOOKEEPER, &env::POSTGRES] {
        command.env(server.var, server.endpoint());
    }
    let ran = command
        .arg(&script)
        .arg(plan.iterations.to_string())
        .arg(plan.warmup.max(1).to_string())
        .output()
        .await?;
    if !ran.status.success() {
        return Err(format!(
            "{} failed ({}): {}",
            script.display(),
            ran.status,
            String::from_utf8_lossy(&ran.stderr)
        )
        .into());
    }
    let answer: Answer = serde_json::from_slice(&ran.stdout)?;
    out.versions.push(format!("Python {}", answer.python));
    for measured in answer.rows {
        let backend = match measured.backend.as_str() {
            "redis" => "redis",
            "zookeeper" => "zookeeper",
            "postgres" => "postgres",
            other => return Err(format!("peers.py measured an unknown backend {other:?}").into()),
        };
        let seconds = |v: &[f64]| -> Vec<Duration> {
            v.iter().map(|s| Duration::from_secs_f64(*s)).collect()
        };
        let row = Row::latency(
            backend,
            measured.operation,
            measured.payload,
            (seconds(&measured.fenced), seconds(&measured.plain)),
            None,
        );
        let flag = if row.ratio > EXPLAIN_ABOVE {
            " (above 1.5: see the findings)"
        } else {
            ""
        };
        let notes = format!("{}{flag}", measured.notes);
        out.rows.push(row.note(notes));
    }
    Ok(())
}
