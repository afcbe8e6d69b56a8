//! Making the test PKI with openssl, and checking one.
//!
//! A throwaway PKI for the TLS variants and the tests: a CA, a server
//! certificate for localhost and 127.0.0.1, a client certificate
//! (CN=fencing: etcd maps a client certificate's CN to its user), and a
//! second, unrelated CA (the tests' WRONG CA). RSA keys as unencrypted
//! PKCS#8 PEM (rustls and ZooKeeper's PEM reader take it; other-ca-key.pem
//! is kept too, for a test that wants a certificate from the wrong CA), all
//! files world-readable: the servers read them as their own users (mariadb
//! as mysql; postgres gets its own copy), the tests as whoever runs them.

use std::fs::{self, File};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{Paths, TLS_USER};

/// Validity of every certificate, in days; `up` makes a new PKI a week
/// before it ends.
const DAYS: &str = "825";
/// How long before its end a certificate counts as ending.
const A_WEEK_SECS: &str = "604800";

/// Every file of a PKI, without `.pem`.
const FILES: [&str; 7] = [
    "ca",
    "ca-key",
    "server",
    "server-key",
    "client",
    "client-key",
    "other-ca",
];

/// The extensions of each certificate.
pub(super) const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// Whether `dir` holds a PKI to keep: every file there, every certificate
/// valid for another week, the leaves chaining to the CA.
pub(super) fn valid(dir: &Path) -> bool {
    let pem = |name: &str| dir.join(format!("{name}.pem")).display().to_string();
    let quiet = |args: &[&str]| crate::util::output(30, "openssl", args, &[]).is_some();
    FILES
        .iter()
        .all(|f| fs::metadata(pem(f)).is_ok_and(|m| m.len() > 0))
        && ["ca", "server", "client", "other-ca"]
            .iter()
            .all(|f| quiet(&["x509", "-checkend", A_WEEK_SECS, "-noout", "-in", &pem(f)]))
        && quiet(&[
            "verify",
            "-CAfile",
            &pem("ca"),
            &pem("server"),
            &pem("client"),
        ])
}

/// `<tls>.new`: where the next PKI is made.
fn staging(tls: &Path) -> PathBuf {
    let mut name = tls.as_os_str().to_owned();
    name.push(".new");
    PathBuf::from(name)
}

/// Makes a PKI in a new directory, then puts it in place of the old one:
/// never half a PKI in `paths.tls`. openssl's output goes to
/// `<logs>/pki.log`.
pub(super) fn make(paths: &Paths) -> Result<(), String> {
    let dir = staging(&paths.tls);
    let log_path = paths.logs.join("pki.log");
    let failed = |what: String| {
        format!(
            "tls: making the test PKI in {} failed ({what}); see {}",
            dir.display(),
            log_path.display()
        )
    };
    remove_dir(&dir).map_err(failed)?;
    fs::create_dir_all(&dir)
        .and_then(|()| fs::create_dir_all(&paths.logs))
        .map_err(|e| failed(e.to_string()))?;
    crate::util::write(&dir.join("openssl.cnf"), OPENSSL_CNF).map_err(failed)?;
    let log = File::options()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| failed(format!("{}: {e}", log_path.display())))?;
    let openssl = Openssl { dir: &dir, log };
    openssl.ca("ca", "fencing test CA").map_err(failed)?;
    openssl
        .leaf("server", "localhost", "server")
        .map_err(failed)?;
    openssl.leaf("client", TLS_USER, "client").map_err(failed)?;
    openssl
        .ca("other-ca", "fencing other CA (trusted by nothing)")
        .map_err(failed)?;
    fs::remove_file(dir.join("openssl.cnf")).map_err(|e| failed(e.to_string()))?;
    for f in FILES {
        chmod(&dir.join(format!("{f}.pem")), 0o644).map_err(failed)?;
    }
    if !valid(&dir) {
        return Err(failed("the new certificates do not verify".to_owned()));
    }
    chmod(&dir, 0o755).map_err(failed)?;
    remove_dir(&paths.tls).map_err(failed)?;
    fs::rename(&dir, &paths.tls)
        .map_err(|e| failed(format!("moving it to {}: {e}", paths.tls.display())))
}

/// openssl run in the new PKI's directory, its output in the log.
struct Openssl<'a> {
    dir: &'a Path,
    log: File,
}

impl Openssl<'_> {
    fn run(&self, args: &[&str]) -> Result<(), String> {
        let clone = || self.log.try_clone().map_err(|e| e.to_string());
        let status = Command::new("timeout")
            .arg("60")
            .arg("openssl")
            .args(args)
            .current_dir(self.dir)
            .stdin(Stdio::null())
            .stdout(clone()?)
            .stderr(clone()?)
            .status()
            .map_err(|e| format!("openssl: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("openssl {} {status}", args.first().unwrap_or(&"")))
        }
    }

    fn key(&self, name: &str) -> Result<(), String> {
        let out = format!("{name}-key.pem");
        self.run(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            &out,
        ])
    }

    /// A self-signed CA.
    fn ca(&self, name: &str, cn: &str) -> Result<(), String> {
        self.key(name)?;
        self.run(&[
            "req",
            "-x509",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            &format!("{name}-key.pem"),
            "-subj",
            &format!("/CN={cn}"),
            "-extensions",
            "ca",
            "-days",
            DAYS,
            "-out",
            &format!("{name}.pem"),
        ])
    }

    /// A certificate signed by `ca.pem`, with the `extensions` section.
    fn leaf(&self, name: &str, cn: &str, extensions: &str) -> Result<(), String> {
        self.key(name)?;
        let csr = format!("{name}.csr");
        self.run(&[
            "req",
            "-new",
            "-config",
            "openssl.cnf",
            "-key",
            &format!("{name}-key.pem"),
            "-subj",
            &format!("/CN={cn}"),
            "-out",
            &csr,
        ])?;
        let serial = crate::util::output(10, "openssl", &["rand", "-hex", "16"], &[])
            .ok_or("openssl rand failed")?;
        self.run(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca-key.pem",
            "-set_serial",
            &format!("0x{}", serial.trim()),
            "-days",
            DAYS,
            "-extfile",
            "openssl.cnf",
            "-extensions",
            extensions,
            "-out",
            &format!("{name}.pem"),
        ])?;
        fs::remove_file(self.dir.join(&csr)).map_err(|e| format!("{csr}: {e}"))
    }
}

fn chmod(path: &Path, mode: u32) -> Result<(), String> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Removes `dir` and what is in it; there being none is fine.
fn remove_dir(dir: &Path) -> Result<(), String> {
    match fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(format!("removing {}: {e}", dir.display()))
        }
        _ => Ok(()),
    }
}
