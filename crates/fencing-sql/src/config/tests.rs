//! `SqlConfig::from_url`: the URLs it takes and the ones it refuses.

use fencing_testkit::refusal::invalid_input_message;

use super::*;

/// A pool on `url`, as a caller opens one.
async fn open(url: &str) -> Result<Db> {
    SqlConfig::from_url(url)?.connect_db().await
}

#[test]
fn good_urls() {
    let c = SqlConfig::from_url("sqlite:///tmp/x.db").unwrap();
    assert_eq!(c.tables().records, "fencing_records");
    let c = SqlConfig::from_url(
        "postgres://u:pw@h/db?sslmode=disable&fencing_table_prefix=t_&application_name=a",
    )
    .unwrap();
    assert_eq!(c.url, "postgres://u:pw@h/db?application_name=a");
    assert_eq!(
        c.tls().mode(fencing_core::tls::TlsMode::Prefer),
        fencing_core::tls::TlsMode::Disable
    );
    assert_eq!(c.tables().leases, "t_leases");
    assert!(!format!("{c:?}").contains("pw"));
    let c = SqlConfig::from_url(
        "mysql://u:pw@h/db?sslmode=verify-full&sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem&charset=utf8mb4",
    )
    .unwrap();
    assert_eq!(c.url, "mysql://u:pw@h/db?charset=utf8mb4");
    assert_eq!(c.tls().ca_file(), Some(std::path::Path::new("/ca.pem")));
    assert!(c.tls().client_cert_files().is_some());
}

#[test]
fn booleans_follow_the_one_rule_and_reach_the_driver_as_it_reads_them() {
    let c = SqlConfig::from_url("mysql://h/db?fencing_accept_volatile_commits=yes").unwrap();
    assert!(c.volatile_commits_accepted);
    let c = SqlConfig::from_url("postgres://h/db?fencing_accept_volatile_commits=0").unwrap();
    assert!(!c.volatile_commits_accepted);
    let c = SqlConfig::from_url("sqlite:///tmp/x.db?immutable=yes&mode=ro").unwrap();
    assert_eq!(c.url, "sqlite:///tmp/x.db?immutable=true&mode=ro");
    let c = SqlConfig::from_url("sqlite:///tmp/x.db?immutable=no").unwrap();
    assert_eq!(c.url, "sqlite:///tmp/x.db?immutable=false");
}

#[test]
fn sqlite_memory_has_no_authority_and_still_parses() {
    let c = SqlConfig::from_url("sqlite::memory:").unwrap();
    assert_eq!(c.url, "sqlite::memory:");
    let c = SqlConfig::from_url("sqlite::memory:?fencing_table_prefix=m_&cache=shared").unwrap();
    assert_eq!(
        (c.url.as_str(), c.tables().records.as_str()),
        ("sqlite::memory:?cache=shared", "m_records")
    );
}

/// Every option of [`BACKEND`] is read: ours and TLS taken out of the
/// URL, the driver's passed on to it, none left over (nor refused as
/// unknown: the descriptor is the one list).
#[test]
fn every_option_of_the_descriptor_is_read() {
    for option in BACKEND.options() {
        let schemes = if option.schemes.is_empty() {
            BACKEND.schemes
        } else {
            option.schemes
        };
        for scheme in schemes {
            let tls = TlsOptions::URL_OPTIONS.contains(&option.name);
            if tls && *scheme == "sqlite" {
                continue; // refused on purpose: a local file
            }
            let pair = format!(
                "{}={}",
                option.name,
                fencing_testkit::refusal::sample(option.kind)
            );
            let url = format!("{scheme}://u:pw@h/db?{pair}");
            match SqlConfig::from_url(&url) {
                Ok(c) => {
                    let ours = tls || option.name.starts_with("fencing_");
                    assert_eq!(c.url.contains(&pair), !ours, "{url} -> {}", c.url);
                }
                Err(e) => {
                    let e = e.to_string();
                    assert!(
                        !e.contains("was not read") && !e.contains("unknown option"),
                        "{url}: {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn bad_urls_are_invalid_input_naming_the_problem() {
    let invalid = |url| invalid_input_message(url, SqlConfig::from_url(url));
    assert!(invalid("oracle://h/db").contains("unsupported database URL"));
    assert!(
        invalid("postgres://u:secret@h/db?fencing_table_prefix=a;drop").contains("table prefix")
    );
    assert!(!invalid("oracle://u:secret@h").contains("secret"));
    assert!(invalid("sqlite://x?fencing_table_prefix=a&fencing_table_prefix=b").contains("twice"));
    // The driver would ignore a misspelt option of ours: other tables.
    let typo = invalid("postgres://u:secret@h/db?fencing_table_prefx=app_");
    assert!(
        typo.contains("\"fencing_table_prefx\"") && typo.contains("fencing_table_prefix"),
        "{typo}"
    );
    // One boolean rule for every backend: `yes` is true, `on` a typo.
    assert!(invalid("mysql://h/db?fencing_accept_volatile_commits=on").contains("true or false"));
    assert!(invalid("sqlite:///tmp/x.db?immutable=si").contains("true or false"));
    assert!(invalid("postgres://h/db?port=x").contains("whole number"));
    assert!(invalid("sqlite:///tmp/x.db?mode=rwx").contains("ro, rw, rwc, memory"));
    // The known options are the scheme's own, named in one list.
    let unknown = invalid("sqlite:///tmp/x.db?charset=utf8");
    assert!(
        unknown.contains("known options: fencing_table_prefix, fencing_accept_volatile_commits, mode, cache, immutable, vfs"),
        "{unknown}"
    );
    assert!(invalid("mysql://h/db?ssl-mode=required").contains("sslmode, sslrootcert"));
    assert!(invalid("postgres://h/db?ssl-root-cert=/ca.pem").contains("sslmode, sslrootcert"));
    // Not enforced by the driver: refused rather than believed.
    let binding = invalid("postgres://u:secret@h/db?sslmode=require&channel_binding=require");
    assert!(
        binding.contains("\"channel_binding\"") && binding.contains("application_name"),
        "{binding}"
    );
    assert!(invalid("mysql://h/db?chrset=utf8mb4").contains("charset"));
    assert!(invalid("sqlite:///tmp/x.db?mdoe=ro").contains("mode"));
    assert!(invalid("postgres://h/db?sslcert=/c.pem").contains("without sslkey"));
    assert!(invalid("postgres://h/db?sslmode=allow").contains("allow"));
    assert!(invalid("sqlite:///tmp/x.db?sslmode=require").contains("no TLS option"));
}

/// sqlx checks a `verify-ca` chain against the public roots too, and
/// not the host name: refused before anything is sent.
#[cfg(all(feature = "postgres", feature = "mysql"))]
#[tokio::test]
async fn verify_ca_is_refused_before_connecting() {
    for url in [
        "postgres://u:secret@127.0.0.1:1/db?sslmode=verify-ca",
        "mysql://u:secret@127.0.0.1:1/db?sslmode=verify-ca&sslrootcert=/ca.pem",
    ] {
        let message = invalid_input_message(url, open(url).await);
        assert!(
            message.contains("verify-full") && !message.contains("secret"),
            "{message}"
        );
    }
}

/// `connect_db` reads the URL as `from_url` does: our option is taken
/// out, and no message shows the password (a URL the driver cannot
/// parse is refused before anything is sent).
#[cfg(feature = "postgres")]
#[tokio::test]
async fn connect_db_refuses_a_malformed_url_without_showing_its_password() {
    for url in [
        "postgres://u:secret@[::1:5432/x",
        "postgres://u:secret@[::1:5432/x?fencing_table_prefix=t_",
        "oracle://u:secret@h/db",
    ] {
        let message = invalid_input_message(url, open(url).await);
        assert!(!message.contains("secret"), "{message}");
        assert!(message.contains("u:***@"), "{message}");
    }
}
