//! PostgreSQL in `docker-compose.yml`: the official image (the native
//! server is Debian's 15), listening on its usual 5432 inside the
//! container, published on the member's port.

use super::start::tls_hba;
use crate::{Container, Service};

const IMAGE: &str = "postgres:15";
/// The port the image's server listens on.
const PORT: u16 = 5432;

/// `postgres`: database and user fencing/fencing. Unlike natively, the
/// image makes `fencing` the superuser (natively it only owns its
/// database).
pub(super) fn single(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| Container {
            name: m.instance.to_owned(),
            image: IMAGE.to_owned(),
            ports: vec![(m.port, PORT)],
            environment: account("fencing"),
            // over TCP: during initialisation the image's temporary server
            // listens on its socket only
            healthcheck: Some("pg_isready -h 127.0.0.1 -U fencing -d fencing".to_owned()),
            ..Container::default()
        })
        .collect()
}

/// `postgres-tls`: TLS with the test certificate (the PKI `services up pki`
/// makes, mounted read-only), SCRAM passwords, pg_hba refusing every TCP
/// connection without TLS, as natively. PostgreSQL wants its key owned by
/// its own user, mode 0600: the container copies it before handing over
/// to the image's entrypoint, and writes the native pg_hba.conf, plus a
/// `local` line trusting the socket: the image's initialisation logs in
/// there as `fencing` (natively the socket admits only the postgres
/// superuser, by peer). Unlike natively, `fencing` is the superuser.
pub(super) fn tls(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let dir = "/etc/fencing-tls";
            let mut script = vec![
                format!("install -d -o postgres -g postgres -m 0700 {dir}"),
                format!("install -o postgres -g postgres -m 0644 /tls/server.pem {dir}/server.pem"),
                format!("install -o postgres -g postgres -m 0600 /tls/server-key.pem {dir}/server-key.pem"),
                format!("echo 'local all all trust' > {dir}/pg_hba.conf"),
            ];
            // (the native `local` line is for a postgres role the image does
            // not make)
            let hba = tls_hba();
            for line in hba.lines().filter(|l| l.starts_with("host")) {
                script.push(format!("echo '{line}' >> {dir}/pg_hba.conf"));
            }
            script.push(format!("chown postgres:postgres {dir}/pg_hba.conf"));
            script.push(format!(
                "exec docker-entrypoint.sh postgres -c ssl=on -c ssl_cert_file={dir}/server.pem \
                 -c ssl_key_file={dir}/server-key.pem -c hba_file={dir}/pg_hba.conf \
                 -c password_encryption=scram-sha-256"
            ));
            Container {
                name: m.instance.to_owned(),
                image: IMAGE.to_owned(),
                command: vec!["sh".to_owned(), "-c".to_owned(), script.join(" && ")],
                ports: vec![(m.port, PORT)],
                environment: account(crate::TLS_PASSWORD),
                volumes: vec!["./integration/.state/tls:/tls:ro".to_owned()],
                healthcheck: Some(format!(
                    "PGPASSWORD={} psql -XAtq 'host=127.0.0.1 sslmode=verify-full \
                     sslrootcert=/tls/ca.pem user={} dbname=fencing' -c 'SELECT 1'",
                    crate::TLS_PASSWORD,
                    crate::TLS_USER
                )),
                ..Container::default()
            }
        })
        .collect()
}

/// The image's environment for user and database `fencing`.
fn account(password: &str) -> Vec<(String, String)> {
    [
        ("POSTGRES_USER", crate::TLS_USER),
        ("POSTGRES_PASSWORD", password),
        ("POSTGRES_DB", "fencing"),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::{SINGLE, TLS};

    #[test]
    fn the_containers_publish_the_members_ports() {
        let single = (SINGLE.compose)(&SINGLE);
        assert_eq!(single[0].name, "postgres");
        assert_eq!(single[0].ports, [(5432, 5432)]);
        let tls = (TLS.compose)(&TLS);
        assert_eq!(tls[0].name, "postgres-tls");
        assert_eq!(tls[0].ports, [(5433, 5432)]);
        assert!(tls[0].environment.contains(&(
            "POSTGRES_PASSWORD".to_owned(),
            "fencing-tls-secret".to_owned()
        )));
    }

    #[test]
    fn the_tls_container_refuses_plaintext_as_the_native_one() {
        let script = &(TLS.compose)(&TLS)[0].command[2];
        assert!(script.contains("echo 'hostnossl all      all      0.0.0.0/0     reject' >>"));
        assert!(script.contains("-c ssl=on"));
    }
}
