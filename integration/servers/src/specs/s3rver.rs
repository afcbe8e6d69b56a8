//! s3rver: an S3 emulator that IGNORES `If-Match` / `If-None-Match`, the
//! unsafe server `fence doctor` must flag.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, NpmTools, Server, Service, Stop};

/// s3rver's npm prefix.
pub const S3RVER_NPM: NpmTools = NpmTools {
    prefix: "s3rver",
    packages: "s3rver@3.7.1",
};
/// The bucket created at start (others through CreateBucket).
pub const BUCKET: &str = "fencing";

const MEMBERS: &[Member] = &[Member {
    instance: "s3rver",
    port: 9100,
    peer_ports: &[],
}];

/// s3rver (on demand): an S3 emulator that ignores `If-Match` /
/// `If-None-Match`, the unsafe server `fence doctor` must flag. It checks
/// SigV4 with access key and secret `S3RVER`.
pub const S3RVER: Server = Server {
    name: "s3rver (ignores S3 preconditions)",
    service: "s3rver",
    var: "FENCING_S3RVER_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: MEMBERS,
};

/// `s3rver`.
pub const SINGLE: Service = Service {
    name: "s3rver",
    about: "s3rver, an S3 emulator that ignores preconditions (for fence doctor)",
    group: Group::OnDemand,
    members: MEMBERS,
    servers: &[S3RVER],
    deps: &[
        Dep::Apt {
            package: "nodejs",
            unless: &[Have::Command("node")],
        },
        Dep::Apt {
            package: "npm",
            unless: &[Have::Command("npm")],
        },
        Dep::Npm(&S3RVER_NPM),
    ],
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
