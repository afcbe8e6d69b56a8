//! `deps`: installs what the selected services need and this machine
//! lacks — Debian packages, the Python venv of the emulators and lock
//! clients, the npm prefixes — and what every run needs. Tools go to the
//! tools directory (under the state directory by default).

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

use super::spawn::tail;
use super::{log, port_open};
use crate::util::have;
use crate::{Dep, Have, NpmTools, PYTHON_TOOLS, Paths, Service};

/// What every run needs, whatever the services. (No protoc: the workspace
/// builds with the one fencing-etcd pins, see .cargo/config.toml.)
pub(crate) const COMMON: &[Dep] = &[
    // the probes: ZooKeeper's four-letter words
    apt("netcat-openbsd", &[Have::Command("nc")]),
    // the probes and set-ups of the HTTP servers, and the foreign-lock tests
    apt("curl", &[Have::Command("curl")]),
    // ss: the pid of a server we did not start (`leader`, `restart`)
    apt("iproute2", &[Have::Command("ss")]),
    // the nemesis tests (integration/tests/nemesis.rs): partitions are
    // iptables rules in network namespaces, skewed clocks are libfaketime
    apt("iptables", &[Have::Command("iptables")]),
    apt(
        "faketime",
        &[Have::File(
            "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        )],
    ),
    // validates the generated docker-compose.yml (`services.sh compose`)
    apt("docker-compose", &[Have::Command("docker-compose")]),
];

const fn apt(package: &'static str, unless: &'static [Have]) -> Dep {
    Dep::Apt { package, unless }
}

/// Whether `have` holds on this machine.
pub(crate) fn holds(condition: &Have) -> bool {
    holds_with(condition, &|h| match h {
        Have::Command(program) => have(program),
        Have::File(path) => Path::new(path).exists(),
        Have::Listening(port) => port_open(*port),
        Have::PostgresServer => postgres_server_installed(),
        Have::PythonVenv => {
            crate::util::output(10, "python3", &["-c", "import venv, ensurepip"], &[]).is_some()
        }
        Have::Either(..) => false, // handled by holds_with
    })
}

/// `have` with the plain checks answered by `check`: [`Have::Either`]
/// holds when either side does.
fn holds_with(have: &Have, check: &dyn Fn(&Have) -> bool) -> bool {
    match have {
        Have::Either(a, b) => holds_with(a, check) || holds_with(b, check),
        plain => check(plain),
    }
}

/// Whether a package with these `unless` checks must be installed: unless
/// every check holds.
fn needed(unless: &[Have], check: &dyn Fn(&Have) -> bool) -> bool {
    !unless.iter().all(|h| holds_with(h, check))
}

/// `/usr/lib/postgresql/*/bin/postgres` exists.
fn postgres_server_installed() -> bool {
    fs::read_dir("/usr/lib/postgresql").is_ok_and(|dirs| {
        dirs.flatten()
            .any(|d| d.path().join("bin/postgres").is_file())
    })
}

/// What is missing.
#[derive(Debug, Default)]
struct Plan {
    apt: Vec<&'static str>,
    python: bool,
    npm: Vec<&'static NpmTools>,
}

fn plan(
    services: &[&Service],
    common: bool,
    check: &dyn Fn(&Have) -> bool,
    installed: &dyn Fn(&Dep) -> bool,
) -> Plan {
    let mut plan = Plan::default();
    let common = if common { COMMON } else { &[] };
    let deps = common
        .iter()
        .chain(services.iter().flat_map(|s| s.deps.iter()));
    for dep in deps {
        match dep {
            Dep::Apt { package, unless } => {
                if !plan.apt.contains(package) && needed(unless, check) {
                    plan.apt.push(package);
                }
            }
            Dep::Python => plan.python |= !installed(dep),
            Dep::Npm(tools) => {
                if !plan.npm.iter().any(|t| t.prefix == tools.prefix) && !installed(dep) {
                    plan.npm.push(tools);
                }
            }
        }
    }
    plan
}

/// The marker the venv gets once installed: the requirements, one a line.
fn python_marker() -> String {
    PYTHON_TOOLS.iter().map(|r| format!("{r}\n")).collect()
}

/// Whether `path` holds `expected` (trailing newlines aside, as the bash's
/// `$(cat …)` compared it).
fn marker_holds(path: &Path, expected: &str) -> bool {
    fs::read_to_string(path)
        .is_ok_and(|text| text.trim_end_matches('\n') == expected.trim_end_matches('\n'))
}

fn venv(paths: &Paths) -> PathBuf {
    paths.tools.join("venv")
}

/// Whether the tools of a Python or npm dependency are installed.
fn tools_installed(paths: &Paths, dep: &Dep) -> bool {
    match dep {
        Dep::Python => marker_holds(&venv(paths).join(".fencing-installed"), &python_marker()),
        Dep::Npm(tools) => marker_holds(
            &paths.tools.join(tools.prefix).join(".fencing-installed"),
            tools.packages,
        ),
        Dep::Apt { .. } => true,
    }
}

/// An install running in a thread, with what it installs and its log.
struct Job {
    what: String,
    log: PathBuf,
    thread: JoinHandle<Result<(), String>>,
}

/// Installs what `services` need and is missing, and with `common` what
/// every run needs ([`COMMON`]: `up` and `deps` ask for it, a restart in
/// the middle of a test run does not).
pub(crate) fn install(paths: &Paths, services: &[&Service], common: bool) -> Result<(), String> {
    let mut plan = plan(services, common, &holds, &|dep| tools_installed(paths, dep));
    for dir in [&paths.tools, &paths.logs] {
        fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    // pip and npm only need the network: run them alongside apt when their
    // interpreter is already there.
    let mut jobs = Vec::new();
    if plan.python && have("python3") && !plan.apt.contains(&"python3-venv") {
        jobs.push(start_python(paths)?);
        plan.python = false;
    }
    if !plan.npm.is_empty() && have("npm") {
        for tools in plan.npm.drain(..) {
            jobs.push(start_npm(paths, tools)?);
        }
    }
    if !plan.apt.is_empty() {
        install_apt(paths, &plan.apt)?;
    }
    if plan.python {
        jobs.push(start_python(paths)?);
    }
    for tools in plan.npm.drain(..) {
        jobs.push(start_npm(paths, tools)?);
    }
    for job in jobs {
        let result = job
            .thread
            .join()
            .unwrap_or_else(|_| Err("the install thread panicked".to_owned()));
        if let Err(e) = result {
            eprint!("{}", tail(&job.log, 20));
            return Err(format!(
                "installing {} failed ({e}); see {}",
                job.what,
                job.log.display()
            ));
        }
    }
    Ok(())
}

fn install_apt(paths: &Paths, packages: &[&str]) -> Result<(), String> {
    let list = packages.join(" ");
    if !have("apt-get") {
        return Err(format!(
            "missing packages ({list}) and no apt-get here: install them yourself"
        ));
    }
    let log_path = paths.logs.join("install-apt.log");
    log(format!(
        "apt-get install {list} (log: {})",
        log_path.display()
    ));
    let log_file = create_log(&log_path)?;
    let mut install = vec!["install", "-y", "--no-install-recommends"];
    install.extend_from_slice(packages);
    let result = run_logged(&log_file, "apt-get", &["update"], &[]).and_then(|()| {
        run_logged(
            &log_file,
            "apt-get",
            &install,
            &[("DEBIAN_FRONTEND", "noninteractive")],
        )
    });
    result.map_err(|_| {
        eprint!("{}", tail(&log_path, 20));
        format!("apt-get install {list} failed; see {}", log_path.display())
    })
}

fn start_python(paths: &Paths) -> Result<Job, String> {
    let log_path = paths.logs.join("install-python.log");
    let venv = venv(paths);
    log(format!(
        "installing {} into {} (log: {})",
        PYTHON_TOOLS.join(" "),
        venv.display(),
        log_path.display()
    ));
    let log_file = create_log(&log_path)?;
    let thread = std::thread::spawn(move || {
        // A venv made while python3-venv was missing has a python but no
        // pip: make it again.
        if !is_executable(&venv.join("bin/pip")) {
            run_logged(&log_file, "python3", &["-m", "venv", &path_str(&venv)], &[])?;
        }
        let pip = path_str(&venv.join("bin/pip"));
        let mut args = vec!["install", "--disable-pip-version-check", "-q"];
        args.extend_from_slice(PYTHON_TOOLS);
        run_logged(&log_file, &pip, &args, &[])?;
        crate::util::write(&venv.join(".fencing-installed"), &python_marker())
    });
    Ok(Job {
        what: "python tools".to_owned(),
        log: log_path,
        thread,
    })
}

fn start_npm(paths: &Paths, tools: &'static NpmTools) -> Result<Job, String> {
    let log_path = paths.logs.join(format!("install-{}.log", tools.prefix));
    let prefix = paths.tools.join(tools.prefix);
    log(format!(
        "installing {} into {} (log: {})",
        tools.packages,
        prefix.display(),
        log_path.display()
    ));
    let log_file = create_log(&log_path)?;
    let thread = std::thread::spawn(move || {
        fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let prefix_arg = path_str(&prefix);
        let mut args = vec![
            "install",
            "--prefix",
            &prefix_arg,
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ];
        args.extend(tools.packages.split_whitespace());
        run_logged(&log_file, "npm", &args, &[])?;
        crate::util::write(
            &prefix.join(".fencing-installed"),
            &format!("{}\n", tools.packages),
        )
    });
    Ok(Job {
        what: tools.prefix.to_owned(),
        log: log_path,
        thread,
    })
}

fn create_log(path: &Path) -> Result<File, String> {
    File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// Runs `program args` with its output appended to `log`.
fn run_logged(
    log: &File,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Result<(), String> {
    let out = log.try_clone().map_err(|e| e.to_string())?;
    let err = log.try_clone().map_err(|e| e.to_string())?;
    let status = Command::new(program)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .status()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {status}",
            args.first().unwrap_or(&"")
        ))
    }
}

fn path_str(path: &Path) -> String {
    path.display().to_string()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests;
