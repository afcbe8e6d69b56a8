//! For the specs' tests: the shared servers, where `services up` runs
//! them, probed (and set up again) as the private ones are.

use crate::{Paths, Service};

/// Probes the members of `services` where `services up all` runs them (on
/// 127.0.0.1, the checkout's paths): each must answer, as every test's
/// server must (`FENCING_SKIP=<name>` skips one, saying so). Then runs,
/// again, their set-ups (they are idempotent).
pub(crate) fn probe_standard(services: &[&Service]) {
    let paths = Paths::from_env();
    let skip = std::env::var("FENCING_SKIP").unwrap_or_default();
    for service in services {
        if skip
            .split(',')
            .map(str::trim)
            .any(|s| s == service.name || s == "all")
        {
            eprintln!("SKIPPED: {} (FENCING_SKIP={skip})", service.name);
            continue;
        }
        for n in 0..service.members.len() {
            let instance = crate::run::instance(&paths, service, n);
            assert!(
                (service.probe)(&instance),
                "{} does not answer on 127.0.0.1:{}: start it with `integration/services.sh up {}`",
                instance.name,
                instance.port,
                service.name
            );
        }
        if let Some(setup) = service.setup {
            setup(&paths, service).unwrap_or_else(|e| panic!("{}: {e}", service.name));
        }
    }
}
