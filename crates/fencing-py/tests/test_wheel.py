"""`pip install fencing` gives the `fence` command: the wheel's console
script runs the Rust CLI it ships, on a PATH with no Rust and no protoc."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def clean_env() -> dict[str, str]:
    """The venv's bin and the system's, nothing of cargo's."""
    venv_bin = str(Path(sys.executable).parent)
    return {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}


def test_the_wheel_gives_the_fence_command(tmp_path: Path) -> None:
    fence = Path(sys.executable).parent / "fence"
    assert fence.is_file(), "the wheel installed no `fence` console script"
    version = subprocess.run(["fence", "--version"], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("fence "), version
    # The demo: two holders, a paused one, its late write refused.
    demo = subprocess.run(["fence", "demo"], env=clean_env(), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "refused" in (demo.stdout + demo.stderr).lower(), demo.stdout


def test_fence_keeps_its_exit_codes_and_its_own_process(tmp_path: Path) -> None:
    """Exec'd in place of Python: the shell sees fence's own exit code and
    pid (its signals and process groups are its own)."""
    bad = subprocess.run(["fence", "no-such-command"], env=clean_env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2, bad
    shown = subprocess.run(
        ["sh", "-c", f'fence run --issuer sqlite://{tmp_path}/locks.db --resource x -- sh -c "echo \\$PPID" & echo $!; wait'],
        env=clean_env(), capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )
    lines = shown.stdout.split()
    assert shown.returncode == 0 and len(lines) == 2, shown
    # The command's parent is the process the shell started: fence itself.
    assert lines[0] == lines[1], shown
