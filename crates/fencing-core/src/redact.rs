//! The one redaction of the workspace: every message, `Debug` print,
//! report and log line that shows a URL or an SDK's text goes through
//! [`redact`] or [`redact_text`], so a password, key, SAS or token never
//! leaves the process in an error.

use crate::percent::percent_decode;

/// Option names whose values are secrets wherever they appear (compared
/// without case, `-` as `_`): an Azure SAS or its signature, an S3
/// presigned URL's signature and credential, passwords, keys, tokens.
pub const SECRET_OPTIONS: &[&str] = &[
    "sas",
    "sig",
    "password",
    "pass",
    "passwd",
    "pwd",
    "sslpassword",
    "key",
    "account_key",
    "accountkey",
    "access_key",
    "secret",
    "secret_key",
    "secret_access_key",
    "token",
    "access_token",
    "session_token",
    "security_token",
    "credentials",
    "sharedaccesssignature",
    "x_amz_signature",
    "x_amz_credential",
    "x_amz_security_token",
];

/// The one redaction of the workspace, for every message, `Debug` print
/// and report that shows a URL (the CLI's too): the password of
/// `user:password@` is replaced by `***` (also when it holds a raw `/`,
/// `?` or `@`, and in a mistyped URL without `://`), and so is the value of
/// every secret option (`sas`, `sig`, `password`, `key`, `token`,
/// `X-Amz-Signature`, …), also inside an option whose value is itself a
/// URL. Other options stay readable.
pub fn redact(url: &str) -> String {
    let Some(i) = url.find("://") else {
        return redact_typo(url);
    };
    let (head, rest) = url.split_at(i + 3);
    // The authority ends at the first `/` or `?` after its last `@`: a
    // password may hold a raw `/`, `?` or `@` (a malformed URL, but one
    // people write), and it must not show in the message that says so.
    let end = match rest.find('@') {
        Some(at) => at + rest[at..].find(['/', '?']).unwrap_or(rest.len() - at),
        None => rest.find(['/', '?']).unwrap_or(rest.len()),
    };
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{user}:***@{host}")
        }
        _ => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => format!("{path}?{}", redact_query(query)),
        None => tail.to_owned(),
    };
    format!("{head}{authority}{tail}")
}

/// A URL without `://` (`redis:/u:PW@h`, `u:PW@h`): everything between the
/// first `:` and the last `@` of the authority goes, user name included,
/// since which colon starts the password cannot be told.
fn redact_typo(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match (base.find(':'), base.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => format!("{}***{}", &base[..=colon], &base[at..]),
        _ => base.to_owned(),
    };
    if let Some(query) = query {
        out.push('?');
        out.push_str(&redact_query(query));
    }
    out
}

/// `a=1&sig=x&endpoint=https://u:p@h` → `a=1&sig=***&endpoint=https://u:***@h`;
/// a value that is a URL once percent-decoded is redacted decoded.
fn redact_query(query: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if is_secret_option(key) => format!("{key}=***"),
            Some((key, value)) => {
                let decoded = percent_decode(value).unwrap_or_else(|_| value.to_owned());
                if decoded.contains("://") || decoded.contains('?') {
                    format!("{key}={}", redact_embedded(&decoded))
                } else {
                    pair.to_owned()
                }
            }
            None => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A decoded option value that holds a URL or a query of its own (an Azure
/// SAS URL given as `endpoint=`).
fn redact_embedded(value: &str) -> String {
    if value.contains("://") {
        redact(value)
    } else {
        redact_query(value)
    }
}

/// Whether `key` names a secret option ([`SECRET_OPTIONS`]): what a
/// backend's descriptor marks secret must be one (the facade's test checks).
pub fn is_secret_option(key: &str) -> bool {
    let key = key.trim().to_ascii_lowercase().replace('-', "_");
    SECRET_OPTIONS.contains(&key.as_str())
}

/// `text` (an SDK's error message) with every URL in it redacted (some
/// SDKs print the request URL, SAS signature and all), and every
/// `Key=value;` pair of a connection string whose key is a secret
/// (`Password=…;`, `AccountKey=…;`).
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // Back to the start of the scheme, forward to the end of the URL:
        // whitespace or a quote; a closing bracket or stop at its very end
        // belongs to the sentence (`(https://…)`), not the URL.
        let scheme_start = rest[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || "+-.".contains(c)))
            .map_or(0, |j| j + 1);
        let mut end = rest[i..]
            .find(|c: char| c.is_whitespace() || "\"'<>`".contains(c))
            .map_or(rest.len(), |j| i + j);
        while end > i + 3 && rest[..end].ends_with([')', ']', '}', ',', '.', ';', ':']) {
            end -= 1;
        }
        out.push_str(&rest[..scheme_start]);
        out.push_str(&redact(&rest[scheme_start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    redact_connection_string(&out)
}

/// `Host=h;Password=pw;` → `Host=h;Password=***;`.
fn redact_connection_string(text: &str) -> String {
    if !text.contains('=') || !text.contains(';') {
        return text.to_owned();
    }
    text.split_inclusive(';')
        .map(|part| {
            let body = part.strip_suffix(';').unwrap_or(part);
            let key_start = body
                .rfind(|c: char| c.is_whitespace() || c == '"' || c == '\'')
                .map_or(0, |j| j + 1);
            match body[key_start..].split_once('=') {
                Some((key, _)) if is_secret_option(key) => {
                    let semicolon = if part.ends_with(';') { ";" } else { "" };
                    format!("{}{key}=***{semicolon}", &body[..key_start])
                }
                _ => part.to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_passwords_and_secret_values_only() {
        assert_eq!(
            redact("postgres://u:secret@h/db?sslmode=require&password=pw"),
            "postgres://u:***@h/db?sslmode=require&password=***"
        );
        assert_eq!(
            redact("az://c?endpoint=https://a.blob.core.windows.net&sas=sv%3D1%26sig%3Dx"),
            "az://c?endpoint=https://a.blob.core.windows.net&sas=***"
        );
        assert_eq!(redact("etcd://h:1"), "etcd://h:1");
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("etcd://user:pw@h:1,g:2"), "etcd://user:***@h:1,g:2");
        assert_eq!(redact("sqlite:///tmp/a.db"), "sqlite:///tmp/a.db");
        assert_eq!(
            redact("s3://b?Secret-Key=x&region=r"),
            "s3://b?Secret-Key=***&region=r"
        );
        assert_eq!(
            redact("postgres://h/db?user=u&password=secret&sslmode=disable"),
            "postgres://h/db?user=u&password=***&sslmode=disable"
        );
        assert_eq!(
            redact("s3://b/k?X-Amz-Signature=abc&X-Amz-Credential=AKID%2F1"),
            "s3://b/k?X-Amz-Signature=***&X-Amz-Credential=***"
        );
        assert_eq!(
            redact("postgres://h/db?email=a@b.c"),
            "postgres://h/db?email=a@b.c"
        );
        assert_eq!(
            redact("postgres://u:p@h/db?email=a@b.c"),
            "postgres://u:***@h/db?email=a@b.c"
        );
    }

    #[test]
    fn raw_slashes_question_marks_and_ats_in_a_password_are_hidden() {
        for (url, shown) in [
            (
                "postgres://fencing:pa/ss@127.0.0.1:5433/db",
                "postgres://fencing:***@127.0.0.1:5433/db",
            ),
            ("redis://u:pa?ss@h:1", "redis://u:***@h:1"),
            ("mysql://u:p@ss@h/db", "mysql://u:***@h/db"),
            ("redis://u:pa)ss@h:1/0", "redis://u:***@h:1/0"),
        ] {
            assert_eq!(redact(url), shown, "{url}");
        }
    }

    #[test]
    fn mistyped_urls_lose_everything_between_the_first_colon_and_the_at() {
        assert_eq!(redact("redis:/u:PW@h"), "redis:***@h");
        assert_eq!(redact("redis:u:p:w@h"), "redis:***@h");
        assert_eq!(redact("u:PW@h:1"), "u:***@h:1");
        assert_eq!(redact("no-url-at-all"), "no-url-at-all");
    }

    #[test]
    fn urls_inside_option_values_are_redacted() {
        // An Azure "Blob service SAS URL", percent-encoded as the docs say.
        let shown = redact(
            "az://c?endpoint=https%3A%2F%2Facct.blob.core.windows.net%2F%3Fsv%3D1%26sig%3DSIGNATURE",
        );
        assert!(!shown.contains("SIGNATURE"), "{shown}");
        assert!(shown.contains("acct.blob.core.windows.net"), "{shown}");
        let shown = redact("s3://b?endpoint=https://user:PW@minio.internal:9000");
        assert!(
            !shown.contains("PW") && shown.contains("minio.internal"),
            "{shown}"
        );
    }

    #[test]
    fn urls_inside_a_message_are_redacted() {
        let message = "error sending request for url (https://acct.blob.core.windows.net/c/k?sv=1&sig=SIGNATURE&se=2): 403";
        let shown = redact_text(message);
        assert!(!shown.contains("SIGNATURE"), "{shown}");
        assert!(
            shown.starts_with("error sending request for url (https://acct.blob"),
            "{shown}"
        );
        assert!(shown.ends_with("&se=2): 403"), "{shown}");
        assert_eq!(redact_text("no url here"), "no url here");
        assert_eq!(
            redact_text("to redis://u:PW@h:1 and postgres://p:Q@h/d."),
            "to redis://u:***@h:1 and postgres://p:***@h/d."
        );
        assert_eq!(
            redact_text("url \"redis://u:pa)ss@h:1\", then"),
            "url \"redis://u:***@h:1\", then"
        );
    }

    #[test]
    fn secret_pairs_of_connection_strings_are_redacted() {
        assert_eq!(
            redact_text("Host=db;Username=u;Password=hunter2;Database=x"),
            "Host=db;Username=u;Password=***;Database=x"
        );
        assert_eq!(
            redact_text(
                "bad: DefaultEndpointsProtocol=https;AccountName=a;AccountKey=KEY==;EndpointSuffix=core.windows.net"
            ),
            "bad: DefaultEndpointsProtocol=https;AccountName=a;AccountKey=***;EndpointSuffix=core.windows.net"
        );
        assert_eq!(redact_text("a; b=c; d"), "a; b=c; d");
    }
}
