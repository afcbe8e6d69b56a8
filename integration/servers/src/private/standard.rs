//! For the specs' tests: the shared servers, where `services up` runs
//! them, probed (and set up again) as the private ones are.

use crate::{Group, Paths, Service};

/// Probes the members of `services` where `services up` runs them (on
/// 127.0.0.1, the checkout's paths): a standard service's must answer, the
/// others' wherever something listens on their ports. Then runs, again,
/// the set-ups of those whose members all answered (they are idempotent).
pub(crate) fn probe_standard(services: &[&Service]) {
    let paths = Paths::from_env();
    for service in services {
        let mut all = true;
        for n in 0..service.members.len() {
            let instance = crate::run::instance(&paths, service, n);
            if service.group != Group::Standard
                && !crate::util::port_open(instance.ip, instance.port)
            {
                eprintln!(
                    "{}: nothing on 127.0.0.1:{}, not probed",
                    instance.name, instance.port
                );
                all = false;
                continue;
            }
            assert!(
                (service.probe)(&instance),
                "{} does not answer on 127.0.0.1:{}: start it with `integration/services.sh up {}`",
                instance.name,
                instance.port,
                service.name
            );
        }
        if let (true, Some(setup)) = (all, service.setup) {
            setup(&paths, service).unwrap_or_else(|e| panic!("{}: {e}", service.name));
        }
    }
}
