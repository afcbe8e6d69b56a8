//! `fence demo` run as a user runs it: the real binary.

use std::process::Command;

fn fence(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fence"))
        .args(args)
        .output()
        .expect("run fence")
}

/// The number after `marker` on the line that holds `line_has` too.
fn number_after(stdout: &str, line_has: &str, marker: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|l| l.contains(line_has) && l.contains(marker))
        .unwrap_or_else(|| panic!("no line with {line_has:?} and {marker:?}:\n{stdout}"));
    let (_, rest) = line.split_once(marker).unwrap();
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no number after {marker:?}: {line}"))
}

/// The same story whatever the tokens are: a fresh SQLite counter starts
/// at the database clock in microseconds, not at 1.
#[test]
fn demo_shows_the_zombie_refused_with_the_typed_error() {
    let out = fence(&["demo", "--ttl", "100ms"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "fence demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first = number_after(&stdout, "client 1  acquires", "-> token ");
    let second = number_after(&stdout, "client 2  acquires", "-> token ");
    assert!(
        first < second,
        "tokens must rise: {first}, {second}\n{stdout}"
    );
    assert!(
        stdout.contains(&format!("REFUSED (store holds {second})")),
        "{stdout}"
    );
    assert!(
        stdout.contains("stale fencing token")
            && stdout.contains(&format!(
                "presented {first}, but the store has already accepted {second}"
            )),
        "{stdout}"
    );
    assert!(stdout.contains("client 2's data is intact"), "{stdout}");
}

#[test]
fn demo_with_fence_on_acquire_refuses_before_the_new_holder_writes() {
    let out = fence(&["demo", "--ttl", "100ms", "--fence-on-acquire"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    let fenced = stdout.find("fences the file").expect("fence step");
    let refused = stdout.find("REFUSED").expect("refusal");
    let wrote = stdout.find("-> accepted").expect("client 2 writes");
    assert!(fenced < refused && refused < wrote, "{stdout}");
}

#[test]
fn bad_durations_are_explained() {
    let out = fence(&["demo", "--ttl", "soon"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("try e.g. 300ms"), "{stderr}");
}

#[test]
fn demo_runs_on_a_named_sqlite_file_and_in_memory() {
    let dir = std::env::temp_dir().join(format!("fence-demo-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("demo.sqlite");
    let out = fence(&["demo", "--ttl", "100ms", "--sqlite", file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("the SQLite file"));
    assert!(file.exists(), "the named file is kept for inspection");
    std::fs::remove_dir_all(&dir).unwrap();

    let out = fence(&["demo", "--ttl", "100ms", "--memory"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("REFUSED"));
}

#[test]
fn demo_draws_its_real_timeline_as_svg() {
    let file = std::env::temp_dir().join(format!("fence-demo-{}.svg", std::process::id()));
    let out = fence(&[
        "demo",
        "--ttl",
        "100ms",
        "--memory",
        "--svg",
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&file).expect("svg written");
    std::fs::remove_file(&file).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for needle in [
        "lease, token 1",
        "lease, token 2",
        "paused",
        "token 2: accepted",
        "token 1: REFUSED (2 seen)",
    ] {
        assert!(svg.contains(needle), "{needle:?} missing from the timeline");
    }
}
