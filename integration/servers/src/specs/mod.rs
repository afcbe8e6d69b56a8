//! One module per server family; each declares its [`Service`]s, their
//! members and [`Server`]s, and how they start, answer, are set up and
//! appear in `docker-compose.yml`.
//!
//! [`Service`]: crate::Service
//! [`Server`]: crate::Server

pub mod azurite;
pub mod etcd;
pub mod gcs;
pub mod mariadb;
pub mod moto;
pub mod pki;
pub mod postgres;
pub mod redis;
pub mod s3rver;
pub mod zookeeper;

use crate::{Dep, Have, Instance, NpmTools};

/// openssl: the test PKI every TLS variant needs (and zk-tls's probe).
pub(crate) const OPENSSL: Dep = apt("openssl", &[Have::Command("openssl")]);
/// Node.js, for the npm tools.
pub(crate) const NODEJS: Dep = apt("nodejs", &[Have::Command("node")]);
/// npm, which installs them.
pub(crate) const NPM: Dep = apt("npm", &[Have::Command("npm")]);
/// Python, for the venv of the emulators and lock clients.
pub(crate) const PYTHON3: Dep = apt("python3", &[Have::Command("python3")]);
/// Debian ships python3 without the venv module.
pub(crate) const PYTHON3_VENV: Dep = apt("python3-venv", &[Have::PythonVenv]);

const fn apt(package: &'static str, unless: &'static [Have]) -> Dep {
    Dep::Apt { package, unless }
}

/// The executable `bin` of the npm prefix `tools`, or an error naming the
/// `services.sh deps` command that installs it.
pub(crate) fn npm_bin(
    instance: &Instance,
    tools: &NpmTools,
    bin: &str,
    service: &str,
) -> Result<String, String> {
    let path = instance
        .paths
        .tools
        .join(tools.prefix)
        .join("node_modules/.bin")
        .join(bin);
    if !path.exists() {
        return Err(format!(
            "{}: {bin} is not installed: no {} (run: integration/services.sh deps {service})",
            instance.name,
            path.display()
        ));
    }
    Ok(path.display().to_string())
}
