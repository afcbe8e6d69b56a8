//! `EtcdConfig`'s parsing, defaults and refusals.

use fencing_testkit::refusal::invalid_input_message;

use super::*;

#[test]
fn good_urls() {
    let c = EtcdConfig::from_url("etcd://h:1").unwrap();
    assert_eq!(c.endpoints(), ["http://h:1"]);
    let c = EtcdConfig::from_url("etcd://h:1,g:2?prefix=p/&timeout=3s&min_ttl=500ms").unwrap();
    assert_eq!(c.endpoints().len(), 2);
    assert_eq!(c.prefix.as_deref(), Some("p/"));
    assert_eq!(c.timeout, Some(Duration::from_secs(3)));
    assert_eq!(c.min_ttl, Some(Duration::from_millis(500)));
    assert!(c.credentials.is_none() && c.tls.is_default());
}

#[test]
fn the_url_takes_every_tls_option() {
    let names: Vec<&str> = BACKEND.options().iter().map(|o| o.name).collect();
    for option in TlsOptions::URL_OPTIONS {
        assert!(names.contains(option), "{option}");
    }
}

#[test]
fn the_documented_defaults_are_the_real_ones() {
    let default = |name: &str| {
        let option = BACKEND.options().into_iter().find(|o| o.name == name);
        option.and_then(|o| o.default).unwrap()
    };
    assert_eq!(default("prefix"), crate::DEFAULT_PREFIX);
    let c = EtcdConfig::from_url(&format!(
        "etcd://h:1?timeout={}&min_ttl={}",
        default("timeout"),
        default("min_ttl")
    ))
    .unwrap();
    assert_eq!(c.timeout, Some(crate::issuer::DEFAULT_OPERATION_TIMEOUT));
    assert_eq!(c.min_ttl, Some(crate::DEFAULT_MIN_TTL));
}

#[test]
fn tls_options_switch_the_endpoints_to_https() {
    let https = |url| EtcdConfig::from_url(url).unwrap().endpoints();
    assert_eq!(
        https("etcd://h:1,g:2?sslrootcert=/ca.pem"),
        ["https://h:1", "https://g:2"]
    );
    assert_eq!(https("etcd://h:1?sslmode=verify-full"), ["https://h:1"]);
    assert_eq!(
        https("etcd://h:1?sslcert=/c.pem&sslkey=/k.pem"),
        ["https://h:1"]
    );
    assert_eq!(https("etcd://h:1?sslmode=disable"), ["http://h:1"]);
    let c = EtcdConfig::from_url("etcd://h:1?sslrootcert=/ca.pem&sslcert=/c.pem&sslkey=/k.pem")
        .unwrap();
    assert_eq!(c.tls().ca_file(), Some(std::path::Path::new("/ca.pem")));
    assert!(c.tls().client_cert_files().is_some());
    // Setters: a TLS option turns http:// endpoints into https://.
    let c =
        EtcdConfig::new(["http://h:1", "g:2"]).with_tls(TlsOptions::new().with_ca_file("/ca.pem"));
    assert_eq!(c.endpoints(), ["https://h:1", "https://g:2"]);
    let c = EtcdConfig::new(["https://h:1"]);
    assert_eq!(c.transport().unwrap().0, TlsMode::VerifyFull);
}

#[test]
fn credentials_come_from_the_authority_and_never_print() {
    let c = EtcdConfig::from_url("etcd://app:p%40ss%2Fw0rd@h:1,g:2?sslrootcert=/ca.pem").unwrap();
    assert_eq!(c.endpoints(), ["https://h:1", "https://g:2"]);
    let creds = c.credentials.as_ref().unwrap();
    assert_eq!(
        (creds.user.as_str(), creds.password()),
        ("app", "p@ss/w0rd")
    );
    let debug = format!("{c:?}");
    assert!(
        !debug.contains("p@ss") && !debug.contains("p%40ss"),
        "{debug}"
    );
    // Credentials without TLS are allowed (a loopback etcd); verify warns past the loopback.
    let c = EtcdConfig::from_url("etcd://app:pw@127.0.0.1:2379").unwrap();
    assert_eq!(c.endpoints(), ["http://127.0.0.1:2379"]);
    let c = EtcdConfig::new(["h:1"]).with_credentials(Credentials::new("u", "pw"));
    assert!(!format!("{c:?}").contains("pw"));
}

#[test]
fn bad_urls_are_invalid_input_naming_the_problem() {
    let invalid = |url| invalid_input_message(url, EtcdConfig::from_url(url));
    assert!(invalid("zk://h:1").contains("etcd URL (etcd://"));
    assert!(invalid("etcd://").contains("no etcd host"));
    assert!(invalid("etcd://h:1,,g:2").contains("\"\" is not an etcd HOST:PORT"));
    assert!(invalid("etcd://h:1/x").contains("\"/x\""));
    let unknown = invalid("etcd://h:1?prefx=a");
    assert!(
        unknown.contains("\"prefx\"")
            && unknown.contains("prefix, layout, timeout, min_ttl, sslmode")
    );
    assert!(invalid("etcd://h:1?timeout=2").contains("timeout=\"2\""));
    assert!(invalid("etcd://h:1?prefix=").contains("prefix=\"\": needs a value"));
    let require = invalid("etcd://h:1?sslmode=require");
    assert!(require.contains("disable, verify-full"), "{require}");
    let verify_ca = invalid("etcd://h:1?sslmode=verify-ca");
    assert!(verify_ca.contains("disable, verify-full"), "{verify_ca}");
    assert!(invalid("etcd://h:1?sslcert=/c.pem").contains("without sslkey"));
    assert!(
        invalid("etcd://h:1?sslmode=disable&sslrootcert=/ca.pem").contains("certificates need TLS")
    );
}

#[test]
fn no_message_shows_the_password() {
    let secret = "hunter2";
    for url in [
        "etcd://u:hunter2@",
        "etcd://u:hunter2@h:1,,g:2",
        "etcd://u:hunter2@h:1/x",
        "etcd://u:hunter2@h:1?prefx=a",
        "etcd://u:hunter2@h:1?sslmode=require",
        "etcd://:hunter2@h:1",
        "etcd://u:hunt/er2@h:1",
        "etcd://u:hunt?er2@h:1",
        "etcd://u:hunter2%zz@h:1",
        "etcx://u:hunter2@h:1",
    ] {
        let message = invalid_input_message(url, EtcdConfig::from_url(url));
        for part in ["hunter2", "hunt", "er2@"] {
            assert!(!message.contains(part), "{url}: {message}");
        }
        assert!(!message.contains(secret));
    }
    // A password without a user, a user without a password.
    assert!(
        invalid_input_message("no user", EtcdConfig::from_url("etcd://:pw@h:1"))
            .contains("user name")
    );
    let no_password = invalid_input_message("no password", EtcdConfig::from_url("etcd://app@h:1"));
    assert!(
        no_password.contains("an etcd user needs its password") && !no_password.contains("app"),
        "{no_password}"
    );
    // What `hosts` refused before this change, quoting the password.
    let message = invalid_input_message("@ in a host", hosts("h:1,u:hunter2@g:2"));
    assert!(
        !message.contains(secret) && message.contains("'@'"),
        "{message}"
    );
}

#[test]
fn the_environment_takes_etcdctls_variables() {
    let from = |pairs: &[(&str, &str)]| {
        let vars: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        EtcdConfig::from_vars(|name| vars.get(name).filter(|v| !v.is_empty()).cloned())
    };
    let c = from(&[
        ("ETCDCTL_ENDPOINTS", "https://h:1/, https://g:2"),
        ("ETCDCTL_USER", "app:pa:ss"),
        ("ETCDCTL_CACERT", "/ca.pem"),
        ("ETCDCTL_CERT", "/c.pem"),
        ("ETCDCTL_KEY", "/k.pem"),
    ])
    .unwrap();
    assert_eq!(c.endpoints(), ["https://h:1", "https://g:2"]);
    let creds = c.credentials.as_ref().unwrap();
    assert_eq!((creds.user.as_str(), creds.password()), ("app", "pa:ss"));
    assert_eq!(c.tls().ca_file(), Some(std::path::Path::new("/ca.pem")));
    assert!(c.tls().client_cert_files().is_some());
    // https:// alone is TLS with the system roots.
    let c = from(&[("ETCDCTL_ENDPOINTS", "https://h:1")]).unwrap();
    assert_eq!(c.transport().unwrap().0, TlsMode::VerifyFull);

    // Ours first; a password of its own; plaintext endpoints.
    let c = from(&[
        ("FENCING_ETCD_ENDPOINTS", "h:1,http://g:2"),
        ("ETCDCTL_ENDPOINTS", "https://other:1"),
        ("FENCING_ETCD_USER", "app"),
        ("FENCING_ETCD_PASSWORD", "pw"),
        ("ETCDCTL_PASSWORD", "not this one"),
        ("FENCING_ETCD_PREFIX", "jobs/"),
    ])
    .unwrap();
    assert_eq!(c.endpoints(), ["http://h:1", "http://g:2"]);
    assert_eq!(c.credentials.as_ref().unwrap().password(), "pw");
    assert_eq!(c.prefix.as_deref(), Some("jobs/"));

    let refused = |pairs: &[(&str, &str)]| invalid_input_message("env", from(pairs));
    let e = refused(&[("ETCDCTL_ENDPOINTS", "h:1"), ("ETCDCTL_USER", "app")]);
    assert!(e.contains("needs its password"), "{e}");
    let e = refused(&[("ETCDCTL_ENDPOINTS", "h:1"), ("ETCDCTL_CERT", "/c.pem")]);
    assert!(e.contains("needs its key"), "{e}");
    let e = refused(&[
        ("ETCDCTL_ENDPOINTS", "h:1"),
        ("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "true"),
    ]);
    assert!(e.contains("always checks"), "{e}");
    assert!(
        from(&[
            ("ETCDCTL_ENDPOINTS", "h:1"),
            ("ETCDCTL_INSECURE_SKIP_TLS_VERIFY", "false")
        ])
        .is_ok()
    );
    let e = refused(&[("ETCDCTL_ENDPOINTS", "u:hunter2@h:1")]);
    assert!(!e.contains("hunter2"), "{e}");
    let e = refused(&[("ETCDCTL_ENDPOINTS", "")]);
    assert!(
        e.contains("FENCING_ETCD_ENDPOINTS") && e.contains("ETCDCTL_ENDPOINTS"),
        "{e}"
    );
}

/// etcd's client would dial an endpoint holding a login and never use it:
/// refused at connect, and the password shows neither there nor in `Debug`.
#[test]
fn a_login_in_an_endpoint_is_refused_and_never_shown() {
    for endpoint in [
        "http://root:s3cret@127.0.0.1:2379",
        "root:s3cret@127.0.0.1:2379",
        "https://root:s3/cr@t@etcd.internal:2379",
    ] {
        let config = EtcdConfig::new([endpoint]);
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3"), "{debug}");
        assert!(debug.contains("root"), "{debug}");
        let message = invalid_input_message(endpoint, config.transport().map(drop));
        assert!(message.contains("holds a login"), "{message}");
        assert!(!message.contains("s3"), "{message}");
    }
    assert!(EtcdConfig::new(["127.0.0.1:2379"]).transport().is_ok());
}
