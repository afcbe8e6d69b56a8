//! s3rver: an S3 emulator that IGNORES `If-Match` / `If-None-Match`, the
//! unsafe server `fence doctor` must flag.

use super::azurite::node_port_check;
use super::{NODEJS, NPM};
use crate::util::curl;
use crate::{Container, Dep, Group, Instance, Launch, Member, NpmTools, Server, Service, Stop};

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
    about: "s3rver 3.7.1 (npm), objects on disk, bucket `fencing` created at start; SigV4 with access key / secret `S3RVER` / `S3RVER`. It **ignores `If-Match` / `If-None-Match`**: the unsafe server `fence doctor` must flag (exit 7), never a store to fence on",
    group: Group::OnDemand,
    members: MEMBERS,
    servers: &[S3RVER],
    deps: &[NODEJS, NPM, Dep::Npm(&S3RVER_NPM)],
    start,
    probe,
    setup: None,
    cluster: None,
    stop: Stop::Term,
    compose,
};

/// Starts s3rver on `instance.ip:instance.port`. Objects on disk under the
/// instance's directory; the bucket is created at start (others through
/// CreateBucket).
fn start(instance: &Instance) -> Result<Launch, String> {
    let bin = super::npm_bin(instance, &S3RVER_NPM, "s3rver", "s3rver")?;
    let objects = instance.dir.join("objects");
    std::fs::create_dir_all(&objects).map_err(|e| {
        format!(
            "{} (port {}): {}: {e}",
            instance.name,
            instance.port,
            objects.display()
        )
    })?;
    Ok(Launch::new(
        bin,
        [
            "-d".to_owned(),
            objects.display().to_string(),
            "-a".to_owned(),
            instance.ip.to_string(),
            "-p".to_owned(),
            instance.port.to_string(),
            "--configure-bucket".to_owned(),
            BUCKET.to_owned(),
        ],
        &instance.dir,
    ))
}

/// Anonymous ListBuckets: s3rver answers it, and names its owner "S3rver".
fn probe(instance: &Instance) -> bool {
    let url = format!("http://{}:{}/", instance.ip, instance.port);
    curl(&[&url]).is_some_and(|out| is_s3rver_listing(&out))
}

fn is_s3rver_listing(body: &str) -> bool {
    body.find("ListAllMyBucketsResult")
        .is_some_and(|at| body[at..].contains("<DisplayName>S3rver<"))
}

// No image of s3rver: Node.js's, with the same pinned package fetched by
// npx at the container's first start (so its first start needs the npm
// registry and takes longer); objects in the container, lost with it.
fn compose(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| Container {
            name: m.instance.to_owned(),
            image: "node:20-alpine".to_owned(),
            command: vec![
                "sh".to_owned(),
                "-c".to_owned(),
                format!(
                    "mkdir -p /data && npx --yes {} -d /data -a 0.0.0.0 -p {} --configure-bucket {BUCKET}",
                    S3RVER_NPM.packages, m.port
                ),
            ],
            ports: vec![(m.port, m.port)],
            healthcheck: Some(node_port_check(m.port)),
            ..Container::default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Private;
    use crate::private::standard::probe_standard;

    #[test]
    fn only_s3rvers_own_listing_is_taken_for_it() {
        let s3rver = "<ListAllMyBucketsResult><Owner><ID>123456</ID><DisplayName>S3rver</DisplayName></Owner></ListAllMyBucketsResult>";
        assert!(is_s3rver_listing(s3rver));
        let moto = "<ListAllMyBucketsResult><Owner><ID>bcaf1ffd86f41161ca5fb16fd081034f</ID><DisplayName>webfile</DisplayName></Owner></ListAllMyBucketsResult>";
        assert!(!is_s3rver_listing(moto));
        assert!(!is_s3rver_listing("<DisplayName>S3rver</DisplayName>"));
    }

    #[test]
    fn s3rver_starts_on_a_free_port_and_answers() {
        let server = Private::start(&SINGLE, &[]).unwrap_or_else(|e| panic!("{e}"));
        // the bucket made at start is there
        let url = format!("http://127.0.0.1:{}/", server.port());
        let listing = curl(&[&url]).unwrap_or_default();
        assert!(
            listing.contains(&format!("<Name>{BUCKET}</Name>")),
            "{listing}"
        );
    }

    #[test]
    fn the_standard_server_answers() {
        probe_standard(&[&SINGLE]);
    }
}
