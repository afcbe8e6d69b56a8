//! `status` and `env`: what runs, and the variables that point the tests
//! at it. Neither takes the lock nor changes anything.

use super::{instance, pids};
use crate::{Paths, SERVICES};

/// `status`: a header, then one line per member of every service: its
/// instance, port, whether it answers, and whether it is ours (with its
/// pid), external, or not running. Lazy: each line is probed when asked
/// for, so a caller can print them as they come.
pub fn status() -> impl Iterator<Item = String> {
    let paths = Paths::from_env();
    let header = std::iter::once(status_line("SERVICE", "PORT", "ANSWERING", "OWNER"));
    let members = SERVICES
        .iter()
        .flat_map(|s| (0..s.members.len()).map(move |index| (*s, index)));
    header.chain(members.map(move |(service, index)| {
        let member = instance(&paths, service, index);
        let answering = (service.probe)(&member);
        let owner = owner(
            pids::our_pid(&paths, &member.name),
            pids::adopted(&paths, &member.name),
            answering || super::port_open(member.port),
        );
        status_line(
            &member.name,
            &member.port.to_string(),
            if answering { "yes" } else { "no" },
            &owner,
        )
    }))
}

/// Whose a member is: ours (with its pid; "adopted" when `restart` took
/// it over from whoever ran it, so `down` leaves it running), external
/// (something else listens on its port), or `-` (nothing runs).
fn owner(ours: Option<u32>, adopted: bool, listening: bool) -> String {
    match ours {
        Some(pid) if adopted => format!("ours (adopted, pid {pid}; down leaves it running)"),
        Some(pid) => format!("ours (pid {pid})"),
        None if listening => "external".to_owned(),
        None => "-".to_owned(),
    }
}

fn status_line(instance: &str, port: &str, answering: &str, owner: &str) -> String {
    format!("{instance:<19} {port:<6} {answering:<10} {owner}")
}

/// `env`: one `export VAR='value'` line per server variable, for
/// `eval "$(integration/services.sh env)"`. A variable already set (and
/// not empty) in the environment wins; otherwise the default, the same as
/// docker-compose.yml's.
pub fn env() -> Vec<String> {
    crate::servers()
        .map(|server| {
            let set = std::env::var(server.var).ok();
            export_line(server.var, set.as_deref(), &server.default_endpoint())
        })
        .collect()
}

/// The `export` line of `var`: `set` unless empty, else `default`,
/// single-quoted so that eval takes it literally (`'` as `'\''`).
fn export_line(var: &str, set: Option<&str>, default: &str) -> String {
    let value = set.filter(|v| !v.is_empty()).unwrap_or(default);
    format!("export {var}='{}'", value.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_already_set_wins_unless_empty() {
        assert_eq!(
            export_line("FENCING_X", Some("http://h:1"), "http://127.0.0.1:2"),
            "export FENCING_X='http://h:1'"
        );
        assert_eq!(
            export_line("FENCING_X", Some(""), "http://127.0.0.1:2"),
            "export FENCING_X='http://127.0.0.1:2'"
        );
        assert_eq!(export_line("FENCING_X", None, "d"), "export FENCING_X='d'");
    }

    #[test]
    fn single_quotes_are_escaped_as_the_bash_did() {
        assert_eq!(export_line("V", Some("it's"), ""), r"export V='it'\''s'");
    }

    #[test]
    fn every_server_variable_is_exported() {
        let lines = env();
        assert_eq!(lines.len(), crate::servers().count());
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("export FENCING_ETCD_ENDPOINTS='"))
        );
    }

    #[test]
    fn an_adopted_member_is_ours_and_says_down_leaves_it() {
        assert_eq!(owner(Some(7), false, true), "ours (pid 7)");
        let adopted = owner(Some(7), true, true);
        assert!(adopted.starts_with("ours (adopted, pid 7"), "{adopted}");
        assert!(adopted.contains("down leaves it running"), "{adopted}");
        // Adopted once, gone now: whoever listens is not ours.
        assert_eq!(owner(None, true, true), "external");
        assert_eq!(owner(None, false, false), "-");
    }

    #[test]
    fn status_lines_are_aligned_like_the_bash_printf() {
        assert_eq!(
            status_line("etcd", "2379", "yes", "ours (pid 7)"),
            "etcd                2379   yes        ours (pid 7)"
        );
    }
}
