//! moto: S3 (plain and HTTPS) and DynamoDB, served one request at a time so
//! that conditional writes are atomic.

use super::{unported_compose, unported_probe, unported_start};
use crate::{Dep, Group, Have, Member, Server, Service, Stop};

const DEPS: &[Dep] = &[
    Dep::Apt {
        package: "python3",
        unless: &[Have::Command("python3")],
    },
    Dep::Apt {
        package: "python3-venv",
        unless: &[Have::Command("python3")],
    },
    Dep::Python,
];
const TLS_DEPS: &[Dep] = &[
    DEPS[0],
    DEPS[1],
    DEPS[2],
    Dep::Apt {
        package: "openssl",
        unless: &[Have::Command("openssl")],
    },
];

const S3_MEMBERS: &[Member] = &[Member {
    instance: "s3",
    port: 9000,
    peer_ports: &[],
}];
const DYNAMODB_MEMBERS: &[Member] = &[Member {
    instance: "dynamodb",
    port: 5010,
    peer_ports: &[],
}];
const S3_TLS_MEMBERS: &[Member] = &[Member {
    instance: "s3-tls",
    port: 9443,
    peer_ports: &[],
}];

/// The S3 emulator (moto).
pub const S3: Server = Server {
    name: "S3 (moto)",
    service: "s3",
    var: "FENCING_S3_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: S3_MEMBERS,
};
/// moto's DynamoDB, served one request at a time so that its conditional
/// writes are atomic.
pub const DYNAMODB: Server = Server {
    name: "DynamoDB (moto)",
    service: "dynamodb",
    var: "FENCING_DYNAMODB_ENDPOINT",
    form: "http://127.0.0.1:{port}",
    members: DYNAMODB_MEMBERS,
};
/// S3 (moto) over HTTPS with the throwaway CA's certificate.
pub const S3_TLS: Server = Server {
    name: "S3 (moto, HTTPS)",
    service: "s3-tls",
    var: "FENCING_S3_TLS_ENDPOINT",
    form: "https://127.0.0.1:{port}",
    members: S3_TLS_MEMBERS,
};

/// `s3`.
pub const S3_SERVICE: Service = Service {
    name: "s3",
    about: "moto (S3), one request at a time",
    group: Group::Standard,
    members: S3_MEMBERS,
    servers: &[S3],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `dynamodb`.
pub const DYNAMODB_SERVICE: Service = Service {
    name: "dynamodb",
    about: "moto (DynamoDB), one request at a time",
    group: Group::OnDemand,
    members: DYNAMODB_MEMBERS,
    servers: &[DYNAMODB],
    deps: DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
/// `s3-tls`.
pub const S3_TLS_SERVICE: Service = Service {
    name: "s3-tls",
    about: "moto (S3) over HTTPS only",
    group: Group::Tls,
    members: S3_TLS_MEMBERS,
    servers: &[S3_TLS],
    deps: TLS_DEPS,
    start: unported_start,
    probe: unported_probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose: unported_compose,
};
