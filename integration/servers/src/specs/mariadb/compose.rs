//! MariaDB in `docker-compose.yml`: the official image of the release
//! Debian ships natively, on its usual 3306 inside the container,
//! published on the member's port.

use crate::{Container, Service};

const IMAGE: &str = "mariadb:10.11";
/// The port the image's server listens on.
const PORT: u16 = 3306;

/// `mariadb`: database and user fencing/fencing. The image makes
/// `fencing@%` only (natively `fencing@localhost` too, for socket clients
/// on the host: none reach a container's socket), and a root without a
/// password (natively root comes in through the socket).
pub(super) fn single(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            let mut environment = account("fencing");
            environment.push((
                "MARIADB_ALLOW_EMPTY_ROOT_PASSWORD".to_owned(),
                "1".to_owned(),
            ));
            Container {
                name: m.instance.to_owned(),
                image: IMAGE.to_owned(),
                ports: vec![(m.port, PORT)],
                environment,
                healthcheck: Some("healthcheck.sh --connect --innodb_initialized".to_owned()),
                ..Container::default()
            }
        })
        .collect()
}

/// `mariadb-tls`: TLS required for every TCP client, with the PKI
/// `services up pki` makes (mounted read-only), and the test user REQUIRE
/// SSL: the container drops that ALTER USER into the image's init scripts
/// before handing over to its entrypoint (they run at the first start; the
/// native server re-applies its init file at each). As for `mariadb`, only
/// `fencing@%`; root gets a random password (natively: the socket only).
pub(super) fn tls(service: &Service) -> Vec<Container> {
    service
        .members
        .iter()
        .map(|m| {
            // (backquoted names: the echo's argument is single-quoted)
            let script = format!(
                "echo 'ALTER USER `{user}`@`%` REQUIRE SSL;' > /docker-entrypoint-initdb.d/fencing-tls.sql \
                 && exec docker-entrypoint.sh mariadbd --ssl-cert=/tls/server.pem \
                 --ssl-key=/tls/server-key.pem --ssl-ca=/tls/ca.pem --require-secure-transport=ON",
                user = crate::TLS_USER
            );
            let mut environment = account(crate::TLS_PASSWORD);
            environment.push(("MARIADB_RANDOM_ROOT_PASSWORD".to_owned(), "1".to_owned()));
            Container {
                name: m.instance.to_owned(),
                image: IMAGE.to_owned(),
                command: vec!["sh".to_owned(), "-c".to_owned(), script],
                ports: vec![(m.port, PORT)],
                environment,
                volumes: vec!["./integration/.state/tls:/tls:ro".to_owned()],
                // over TCP (the image's initialisation runs without networking),
                // the certificate verified, as the native probe
                healthcheck: Some(format!(
                    "MYSQL_PWD={} mariadb --protocol=tcp -h 127.0.0.1 -u {} --ssl-ca=/tls/ca.pem \
                     --ssl-verify-server-cert fencing -e 'SELECT 1'",
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
        ("MARIADB_DATABASE", "fencing"),
        ("MARIADB_USER", crate::TLS_USER),
        ("MARIADB_PASSWORD", password),
    ]
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .to_vec()
}

#[cfg(test)]
mod tests {
    use super::super::{SINGLE, TLS};

    #[test]
    fn the_containers_publish_the_members_ports_with_the_accounts() {
        let single = &(SINGLE.compose)(&SINGLE)[0];
        assert_eq!(
            (single.name.as_str(), single.ports[0]),
            ("mariadb", (3306, 3306))
        );
        assert!(
            single
                .environment
                .contains(&("MARIADB_PASSWORD".to_owned(), "fencing".to_owned()))
        );
        let tls = &(TLS.compose)(&TLS)[0];
        assert_eq!(
            (tls.name.as_str(), tls.ports[0]),
            ("mariadb-tls", (3307, 3306))
        );
        assert!(tls.environment.contains(&(
            "MARIADB_PASSWORD".to_owned(),
            "fencing-tls-secret".to_owned()
        )));
        let script = &tls.command[2];
        assert!(script.contains("REQUIRE SSL") && script.contains("--require-secure-transport=ON"));
    }
}
