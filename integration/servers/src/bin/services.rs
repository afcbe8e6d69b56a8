//! `services`: installs, starts, probes and stops this workspace's test
//! servers (`integration/services.sh` runs it; `services.sh help`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(fencing_servers::run::main(&args));
}
