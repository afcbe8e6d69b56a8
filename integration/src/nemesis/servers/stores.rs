//! The stores of a partition run, and the one server of a single-server
//! run: PostgreSQL and moto, each in a host of its own, started from their
//! specs' start functions.

use std::path::Path;

use fencing_servers::{Instance, Member, specs};

use super::{Proc, instance};
use crate::nemesis::net::{Host, run};

/// The member whose ports the nemesis's PostgreSQL takes.
fn postgres_member() -> &'static Member {
    &specs::postgres::SINGLE.members[0]
}

/// The member whose ports the nemesis's moto takes: `s3`'s (moto answers
/// every AWS service on one port, DynamoDB included).
fn moto_member() -> &'static Member {
    &specs::moto::S3_SERVICE.members[0]
}

/// A PostgreSQL server of its own (a private cluster made in `dir`, trust
/// auth from the bridge) in `host`; returns it and its URL.
pub fn postgres(host: &Host, dir: &Path) -> Result<(Proc, String), String> {
    // The PostgreSQL user must traverse every directory above its data
    // directory; the spec opens up the instance's own.
    let d = dir.display().to_string();
    run("chmod", &["755", &d]).map_err(|e| format!("postgres in {}: {e}", host.ns))?;
    let instance = instance("postgres", 1, host, postgres_member(), Vec::new(), dir)?;
    // The host's namespace reaches nothing but the bridge, so any address
    // a connection comes from is one of the bridge's.
    let launch = specs::postgres::private_cluster(&instance, "0.0.0.0/0")?;
    let url = specs::postgres::private_url(&instance);
    let proc = Proc::new(host, &instance, launch).serving()?;
    Ok((proc, url))
}

/// moto (the S3 emulator `services.sh` installs) in `host`, with `bucket`
/// created; returns it and the store URL. The same process serves
/// DynamoDB ([`dynamodb_url`]): moto answers every AWS service on one port.
pub fn moto(host: &Host, dir: &Path, bucket: &str) -> Result<(Proc, String), String> {
    let instance = instance("moto", 1, host, moto_member(), Vec::new(), dir)?;
    let launch = specs::moto::start(&instance)?;
    let proc = Proc::new(host, &instance, launch).serving()?;
    let endpoint = endpoint(&instance);
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
    )
    .map_err(|e| {
        format!(
            "moto on {}:{}: creating bucket {bucket}: {e}; log {}",
            instance.ip,
            instance.port,
            proc.log.display()
        )
    })?;
    Ok((
        proc,
        format!("s3://{bucket}?endpoint={endpoint}&path_style=true&emulator=true&region=us-east-1"),
    ))
}

fn endpoint(instance: &Instance) -> String {
    format!("http://{}:{}", instance.ip, instance.port)
}

/// The DynamoDB URL of `table` on the moto that [`moto`] started in
/// `host` (issuer and store, the table made by the first open).
pub fn dynamodb_url(host: &Host, table: &str) -> String {
    format!(
        "dynamodb://{table}?endpoint=http://{}:{}&emulator=true&create_table=true",
        host.ip,
        moto_member().port
    )
}
