use super::*;

const NODE: Have = Have::Command("node");
const PORT: Have = Have::Listening(6379);

/// A machine with `node`, nothing on 6379, the PostgreSQL server.
fn machine(h: &Have) -> bool {
    matches!(h, Have::Command("node") | Have::PostgresServer)
}

#[test]
fn either_holds_when_one_side_does() {
    assert!(holds_with(&Have::Either(&NODE, &PORT), &machine));
    assert!(holds_with(&Have::Either(&PORT, &NODE), &machine));
    assert!(!holds_with(&Have::Either(&PORT, &PORT), &machine));
}

#[test]
fn a_package_is_skipped_only_when_every_check_holds() {
    assert!(!needed(&[NODE, Have::PostgresServer], &machine));
    assert!(needed(&[NODE, PORT], &machine));
    assert!(needed(&[PORT], &machine));
    assert!(!needed(
        &[Have::Either(&PORT, &Have::PostgresServer)],
        &machine
    ));
}

#[test]
fn the_plan_lists_each_package_and_prefix_once() {
    static TOOLS: NpmTools = NpmTools {
        prefix: "p",
        packages: "a@1 b@2",
    };
    static DEPS: [Dep; 4] = [
        Dep::Apt {
            package: "nodejs",
            unless: &[Have::Command("nope")],
        },
        Dep::Apt {
            package: "nodejs",
            unless: &[Have::Command("nope")],
        },
        Dep::Npm(&TOOLS),
        Dep::Python,
    ];
    let mut service = *crate::service("etcd").unwrap();
    service.deps = &DEPS;
    let missing = plan(&[&service, &service], true, &machine, &|_| false);
    assert_eq!(missing.apt.iter().filter(|p| **p == "nodejs").count(), 1);
    // None of the common tools are on this imaginary machine.
    for common in [
        "netcat-openbsd",
        "curl",
        "iproute2",
        "faketime",
        "docker-compose",
    ] {
        assert!(missing.apt.contains(&common), "{common}");
    }
    assert!(missing.python);
    assert_eq!(missing.npm.len(), 1);

    // A restart in a test run installs the service's own, not the common ones.
    let restart = plan(&[&service], false, &machine, &|_| false);
    assert!(!restart.apt.contains(&"curl"), "{:?}", restart.apt);
    assert!(restart.apt.contains(&"nodejs"));

    let installed = plan(&[&service], true, &|_| true, &|_| true);
    assert!(installed.apt.is_empty() && !installed.python && installed.npm.is_empty());
}

#[test]
fn the_python_marker_is_one_requirement_a_line() {
    let marker = python_marker();
    assert_eq!(marker.lines().count(), PYTHON_TOOLS.len());
    assert!(marker.ends_with('\n'));
    assert!(marker.starts_with("moto[s3]=="));
}

#[test]
fn markers_compare_without_trailing_newlines() {
    let dir = std::env::temp_dir().join(format!("fencing-marker-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join(".fencing-installed");
    fs::write(&file, "a@1 b@2\n").unwrap();
    assert!(marker_holds(&file, "a@1 b@2"));
    assert!(!marker_holds(&file, "a@1 b@3"));
    assert!(!marker_holds(&dir.join("missing"), "a@1 b@2"));
    let _ = fs::remove_dir_all(&dir);
}
