//! Pid files: `PID STARTTIME`, one per instance `services` started. The
//! start time guards against a reused pid, so we never signal a process
//! that merely inherited the number of one we started. The format is the
//! one `services.sh` wrote, so servers it started are still ours.

use std::fs;
use std::path::PathBuf;

use crate::Paths;

/// A process as recorded: its pid and its start time (clock ticks since
/// boot, field 22 of `/proc/PID/stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Recorded {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Recorded {
    /// Whether the recorded process still runs (the same pid with the
    /// same start time, and not a zombie).
    pub(crate) fn alive(self) -> bool {
        proc_start(self.pid) == Some(self.start)
    }
}

/// The start time of `pid`, `None` if it is gone or a zombie (a zombie is
/// dead: it holds no port and answers no signal).
pub(crate) fn proc_start(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Field 22 of a `/proc/PID/stat` line, unless the state (field 3) is `Z`.
fn parse_stat(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses; every
    // field after its last `)` is plain.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if *fields.first()? == "Z" {
        return None;
    }
    // fields[0] is field 3, so field 22 is fields[19].
    fields.get(19)?.parse().ok()
}

/// `PID STARTTIME` as written in a pid file.
fn parse_pid_file(text: &str) -> Option<Recorded> {
    let mut words = text.split_whitespace();
    let pid = words.next()?.parse().ok()?;
    let start = words.next()?.parse().ok()?;
    Some(Recorded { pid, start })
}

/// The pid file of `instance`.
pub(crate) fn pid_file(paths: &Paths, instance: &str) -> PathBuf {
    paths.pids.join(format!("{instance}.pid"))
}

/// The process we recorded for `instance`, if it still runs.
pub(crate) fn ours(paths: &Paths, instance: &str) -> Option<Recorded> {
    let text = fs::read_to_string(pid_file(paths, instance)).ok()?;
    parse_pid_file(&text).filter(|r| r.alive())
}

/// The pid of our process for `instance`, if it still runs.
pub(crate) fn our_pid(paths: &Paths, instance: &str) -> Option<u32> {
    ours(paths, instance).map(|r| r.pid)
}

/// Records `pid` as `instance`'s process.
pub(crate) fn record(paths: &Paths, instance: &str, pid: u32) -> Result<Recorded, String> {
    // A process that died already has no start time: record it with 0,
    // which no live process has, so it reads as dead (as the bash did with
    // an empty start time).
    let start = proc_start(pid).unwrap_or(0);
    crate::util::write(&pid_file(paths, instance), &format!("{pid} {start}\n"))?;
    Ok(Recorded { pid, start })
}

/// The marker of an instance `restart` took over from whoever ran it (the
/// machine's PostgreSQL, say): `<pids>/<instance>.adopted`.
fn adopted_file(paths: &Paths, instance: &str) -> PathBuf {
    paths.pids.join(format!("{instance}.adopted"))
}

/// Records that `instance` was adopted: `restart` stopped someone else's
/// server and started it again as ours. `down` then leaves it running,
/// as it was found: stopping it would take the machine's server down for
/// good (nothing else starts it again). The marker outlives the process
/// and its pid file (a fault test may kill it, `up` start it again); only
/// `clean` removes it, with the pid files.
pub(crate) fn mark_adopted(paths: &Paths, instance: &str) -> Result<(), String> {
    crate::util::write(
        &adopted_file(paths, instance),
        "started as ours by `services restart` in place of a server we had not started; \
         `down` leaves it running\n",
    )
}

/// Whether `instance` was adopted (see [`mark_adopted`]).
pub(crate) fn adopted(paths: &Paths, instance: &str) -> bool {
    adopted_file(paths, instance).exists()
}

/// Drops `instance`'s adoption marker (someone else runs it now).
pub(crate) fn unadopt(paths: &Paths, instance: &str) {
    let _ = fs::remove_file(adopted_file(paths, instance));
}

/// Forgets `instance`'s process (it is gone, or not ours).
pub(crate) fn forget(paths: &Paths, instance: &str) {
    let _ = fs::remove_file(pid_file(paths, instance));
}

/// The pid of whatever listens on `port` of this machine (for members we
/// did not start): the first `pid=` of `ss -Hltnp "sport = :PORT"`.
pub(crate) fn listener_pid(port: u16) -> Option<u32> {
    let out = crate::util::output(5, "ss", &["-Hltnp", &format!("sport = :{port}")], &[])?;
    parse_ss_pid(&out)
}

fn parse_ss_pid(ss: &str) -> Option<u32> {
    let at = ss.find("pid=")? + "pid=".len();
    let digits: String = ss[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_even_with_spaces_in_the_name() {
        let stat = "4242 (my (odd) srv) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(stat), Some(987_654));
    }

    #[test]
    fn a_zombie_has_no_start_time() {
        let stat =
            "4242 (etcd) Z 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(stat), None);
        assert_eq!(parse_stat("4242 (etcd) S 1"), None);
    }

    #[test]
    fn this_process_is_alive_with_its_own_start_time() {
        let pid = std::process::id();
        let start = proc_start(pid).expect("our own stat");
        assert!(Recorded { pid, start }.alive());
        assert!(
            !Recorded {
                pid,
                start: start + 1
            }
            .alive()
        );
    }

    #[test]
    fn pid_files_are_pid_then_start_time() {
        assert_eq!(
            parse_pid_file("123 456\n"),
            Some(Recorded {
                pid: 123,
                start: 456
            })
        );
        // The bash wrote "PID " when the process was gone before it looked.
        assert_eq!(parse_pid_file("123 \n"), None);
        assert_eq!(parse_pid_file(""), None);
        assert_eq!(parse_pid_file("x 1"), None);
    }

    #[test]
    fn the_listener_pid_comes_from_ss() {
        let line = "LISTEN 0 4096 127.0.0.1:2379 0.0.0.0:* users:((\"etcd\",pid=3811,fd=7))\n";
        assert_eq!(parse_ss_pid(line), Some(3811));
        assert_eq!(parse_ss_pid(""), None);
    }
}
