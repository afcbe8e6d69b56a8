//! The committed `docker-compose.yml` is the one the specs render, covers
//! every member, and is a valid compose file.

use std::path::{Path, PathBuf};
use std::process::Command;

use fencing_servers::{SERVICES, compose};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Set to rewrite the committed file instead of comparing it (until
/// `services compose` exists, and for a quick regeneration).
const BLESS: &str = "FENCING_BLESS_COMPOSE";

#[test]
fn the_committed_file_is_the_rendered_one() {
    let path = repo_root().join("docker-compose.yml");
    let rendered = compose::render();
    if std::env::var_os(BLESS).is_some() {
        std::fs::write(&path, &rendered)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        return;
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        committed == rendered,
        "docker-compose.yml is stale: run `integration/services.sh compose > docker-compose.yml` \
         (or `{BLESS}=1 cargo test -p fencing-servers --test compose`)"
    );
}

#[test]
fn every_member_has_a_container_with_its_port_published() {
    let mut missing = Vec::new();
    for service in SERVICES {
        let containers = (service.compose)(service);
        if !service.members.is_empty() && containers.is_empty() {
            missing.push(format!("{}: no container", service.name));
        }
        for member in service.members {
            let published = containers
                .iter()
                .any(|c| c.ports.iter().any(|(host, _)| *host == member.port));
            if !published && !containers.is_empty() {
                missing.push(format!(
                    "{}: port {} of {} is not published",
                    service.name, member.port, member.instance
                ));
            }
        }
        for c in &containers {
            assert!(
                c.image.contains(':') && !c.image.ends_with(":latest"),
                "{}: image {} has no pinned tag",
                c.name,
                c.image
            );
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_rendered_file_is_valid_compose() {
    assert!(
        fencing_servers::util::have("docker-compose"),
        "docker-compose is not installed (run: integration/services.sh deps, \
         or apt-get install docker-compose)"
    );
    // In a directory of its own, with the repository as the project
    // directory: the TLS variants' volumes are relative to it.
    let dir = std::env::temp_dir().join(format!("fencing-compose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("docker-compose.yml");
    std::fs::write(&file, compose::render()).unwrap();
    let out = Command::new("docker-compose")
        .arg("-f")
        .arg(&file)
        .arg("--project-directory")
        .arg(repo_root())
        .args(["config", "-q"])
        .output()
        .expect("cannot run docker-compose");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "docker-compose config rejects the rendered file ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
