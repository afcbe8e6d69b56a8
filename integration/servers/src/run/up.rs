//! `up`, `down`, `deps`, `restart` and `clean`.

#[cfg(test)]
mod tests;

use std::fs;

use super::lock::Lock;
use super::pids::{self, Recorded};
use super::spawn::{spawn, wait_answering};
use super::stop::{stop_instances, stop_listener};
use super::{cluster, install, instance, log, port_open, selected};
use crate::specs::pki;
use crate::{Group, Instance, Paths, Service};

/// `up`: installs what is missing, starts every member of the named
/// services that is not answering, waits until all answer, then waits for
/// the clusters to form and runs the set-ups. No names: the standard
/// services; `all`; `tls`. A port that answers already is reused, never
/// restarted (and if we did not start it, `down` will not stop it).
///
/// # Errors
/// An unknown name, a failed install, a server that does not start or
/// answer (with the end of its log), a cluster that does not form, a
/// failed set-up.
pub fn up<S: AsRef<str>>(names: &[S]) -> Result<(), String> {
    let services = selected(names)?;
    let paths = Paths::from_env();
    let _lock = Lock::take(&paths)?;
    install::install(&paths, &services, true)?;
    let tls = services.iter().any(|s| s.group == Group::Tls);
    let new_pki = tls && pki::ensure(&paths)?;
    // Start everything first, then wait: the JVMs, etcd and the emulators
    // boot in parallel.
    let mut waits: Vec<(&Service, Instance)> = Vec::new();
    for service in &services {
        for index in 0..service.members.len() {
            let member = instance(&paths, service, index);
            if new_pki && service.group == Group::Tls && port_open(member.port) {
                // A TLS variant still serving the certificates of the PKI
                // just replaced: start it again (ours), or say so (not
                // ours: it fails the tests until whoever started it
                // restarts it).
                if pids::ours(&paths, &member.name).is_some() {
                    log(format!("{}: new test PKI, restarting", member.name));
                    stop_instances(&paths, &[(&member.name, service.stop)]);
                } else {
                    log(format!(
                        "{}: warning: not started by services.sh, and still has the old test certificates",
                        member.name
                    ));
                }
            }
            if port_open(member.port) {
                // Already there: reuse it, never restart it. Only a process
                // we recorded is ours.
                match pids::our_pid(&paths, &member.name) {
                    Some(pid) => log(format!(
                        "{}: already running (ours, pid {pid}) on 127.0.0.1:{}",
                        member.name, member.port
                    )),
                    None => {
                        pids::forget(&paths, &member.name);
                        // Someone else runs it now: it is no longer one we adopted.
                        pids::unadopt(&paths, &member.name);
                        log(format!(
                            "{}: something already listens on 127.0.0.1:{}; reusing it (external: down will not stop it)",
                            member.name, member.port
                        ));
                    }
                }
            } else {
                start_instance(&paths, service, &member)?;
            }
            waits.push((service, member));
        }
    }
    for (service, member) in &waits {
        wait_answering(&paths, service, member)?;
    }
    for service in &services {
        settle(&paths, service)?;
    }
    let names: Vec<&str> = services.iter().map(|s| s.name).collect();
    log(format!("up: {} answering", names.join(" ")));
    Ok(())
}

/// What follows a service's answering: its cluster forming, its set-up
/// (accounts, buckets, the replica following its primary).
fn settle(paths: &Paths, service: &Service) -> Result<(), String> {
    if service.members.is_empty() {
        log(format!(
            "{}: {}, in {}",
            service.name,
            service.about,
            paths.tls.display()
        ));
    }
    if let Some(ops) = service.cluster {
        cluster::wait_formed(paths, service, ops, service.members.len())?;
    }
    if let Some(setup) = service.setup {
        setup(paths, service)?;
    }
    Ok(())
}

/// Creates the member's data directory, asks its service how to start it,
/// and starts it as ours.
pub(crate) fn start_instance(
    paths: &Paths,
    service: &Service,
    member: &Instance,
) -> Result<Recorded, String> {
    fs::create_dir_all(&member.dir).map_err(|e| {
        format!(
            "{}: cannot create its data directory {}: {e}",
            member.name,
            member.dir.display()
        )
    })?;
    let launch = (service.start)(member)?;
    spawn(paths, &member.name, &launch)
}

/// `down`: stops what this checkout started among the named services'
/// members (no names: every service, the on-demand ones included, so a
/// second checkout finds its ports free). Never stops anything else, nor
/// a member `restart` adopted from whoever ran it (the machine's
/// PostgreSQL): that one is left running, as it was found.
///
/// # Errors
/// An unknown name, or the lock not taken.
pub fn down<S: AsRef<str>>(names: &[S]) -> Result<(), String> {
    let services = if names.is_empty() {
        selected(&["all"])?
    } else {
        selected(names)?
    };
    down_in(&Paths::from_env(), &services)
}

/// [`down`] of `services` under `paths`.
pub(crate) fn down_in(paths: &Paths, services: &[&Service]) -> Result<(), String> {
    let _lock = Lock::take(paths)?;
    down_locked(paths, services)
}

/// `down_in` for a caller holding the lock.
fn down_locked(paths: &Paths, services: &[&Service]) -> Result<(), String> {
    let mut targets = Vec::new();
    for service in services {
        for member in service.members {
            let ours = pids::ours(paths, member.instance);
            if ours.is_some() && pids::adopted(paths, member.instance) {
                // Stopping it would leave the machine without the server
                // it ran before `restart` took it over (nothing of ours
                // starts it at boot): the next session would find it down.
                log(format!(
                    "{}: adopted by `restart` from whoever ran it before; leaving it running, as it was found",
                    member.instance
                ));
                continue;
            }
            targets.push((member.instance, service.stop));
            if ours.is_none() && port_open(member.port) {
                log(format!(
                    "{}: not started by services.sh, leaving it running",
                    member.instance
                ));
            }
        }
    }
    stop_instances(paths, &targets);
    Ok(())
}

/// `deps`: only installs what the named services need (`up` does this
/// too).
///
/// # Errors
/// An unknown name, a failed install.
pub fn deps<S: AsRef<str>>(names: &[S]) -> Result<(), String> {
    let services = selected(names)?;
    let paths = Paths::from_env();
    let _lock = Lock::take(&paths)?;
    install::install(&paths, &services, true)
}

/// `restart NAME`: stops a single-server service, whoever started it
/// (for fault tests), then starts it as ours, waits until it answers and
/// runs its set-up. A server we had not started (the machine's
/// PostgreSQL) is recorded as adopted, so that `down` leaves it running.
///
/// # Errors
/// An unknown name, a service of several members (see
/// [`restart_member`](super::restart_member)), a server that does not
/// stop, start or answer.
pub fn restart(name: &str) -> Result<(), String> {
    let service = crate::service(name).ok_or_else(|| format!("unknown service '{name}'"))?;
    restart_in(&Paths::from_env(), service)
}

/// [`restart`] of `service` under `paths`.
pub(crate) fn restart_in(paths: &Paths, service: &Service) -> Result<(), String> {
    let name = service.name;
    if service.members.len() != 1 {
        return Err(format!(
            "restart takes a single-server service, not '{name}' (use restart-member)"
        ));
    }
    let member = instance(paths, service, 0);
    let _lock = Lock::take(paths)?;
    let ours = pids::our_pid(paths, &member.name);
    let pid = ours.or_else(|| pids::listener_pid(member.port));
    if let Some(pid) = pid {
        stop_listener(&member.name, pid, member.port, service.stop)?;
    }
    if takes_over(ours, pid) {
        // Recorded before it starts as ours: whatever happens next, `down`
        // must not be the one to stop the machine's server for good.
        pids::mark_adopted(paths, &member.name)?;
        log(format!(
            "{}: pid {} was not ours; adopted (down will leave it running)",
            member.name,
            pid.unwrap_or_default()
        ));
    }
    pids::forget(paths, &member.name);
    install::install(paths, &[service], false)?;
    if service.group == Group::Tls {
        pki::ensure(paths)?;
    }
    start_instance(paths, service, &member)?;
    wait_answering(paths, service, &member)?;
    settle(paths, service)?;
    log(format!("{}: restarted", member.name));
    Ok(())
}

/// Whether `restart` takes over someone else's server: it stopped a
/// listener (`stopped`) that was not our recorded process (`ours`).
fn takes_over(ours: Option<u32>, stopped: Option<u32>) -> bool {
    ours.is_none() && stopped.is_some()
}

/// `clean`: `down` for every service, then deletes the data, logs, pid
/// files and the test PKI (the installed tools stay).
///
/// # Errors
/// What `down` returns, or a directory that cannot be removed.
pub fn clean() -> Result<(), String> {
    let paths = Paths::from_env();
    // One lock for the stop and the deletes: an `up` in between would
    // start servers on data about to be deleted.
    let _lock = Lock::take(&paths)?;
    down_locked(&paths, &selected(&["all"])?)?;
    for dir in [&paths.data, &paths.logs, &paths.pids, &paths.tls] {
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("cannot remove {}: {e}", dir.display()));
            }
            _ => {}
        }
    }
    log(format!(
        "removed {}, {}, {} and {} (kept {})",
        paths.data.display(),
        paths.logs.display(),
        paths.pids.display(),
        paths.tls.display(),
        paths.tools.display()
    ));
    Ok(())
}
