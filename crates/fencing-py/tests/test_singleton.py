"""examples/singleton.py as users run it: two schedulers, one leads; the
leader killed, the other takes over with a higher token; the old leader
paused past the TTL is refused at the store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import fencing
from conftest import ISSUERS, STORES, unique

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "singleton.py"


def scheduler(issuer_url: str, store_url: str, name: str, ticks: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE), issuer_url, store_url, name, str(ticks)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def line(process: subprocess.Popen[str]) -> dict[str, int]:
    assert process.stdout is not None
    text = process.stdout.readline()
    assert text, process.stderr.read() if process.stderr else ""
    parsed: dict[str, int] = json.loads(text)
    return parsed


def test_one_scheduler_leads_and_the_next_takes_over_when_it_dies() -> None:
    issuer_url, store_url, name = ISSUERS["redis"](""), STORES["postgres"](""), unique("beat")
    first = scheduler(issuer_url, store_url, name, ticks=1000)
    leader = line(first)
    assert leader["leader"] == first.pid
    assert line(first) == {"tick": 0}
    second = scheduler(issuer_url, store_url, name, ticks=2)
    try:
        first.kill()  # SIGKILL: nothing released, the lease runs out
        first.wait()
        taken = line(second)
        assert taken["leader"] == second.pid and taken["token"] > leader["token"]
        assert line(second) == {"tick": 0} and line(second) == {"tick": 1}
        assert second.wait(timeout=30) == 0
    finally:
        second.kill()
    read = fencing.open_store(store_url).get(f"{name}/last-tick")
    assert read is not None and json.loads(read.value)["pid"] == second.pid


def test_a_paused_scheduler_does_not_run_a_tick_twice() -> None:
    issuer_url, store_url, name = ISSUERS["redis"](""), STORES["postgres"](""), unique("beat")
    first = scheduler(issuer_url, store_url, name, ticks=1000)
    leader = line(first)
    line(first)
    os.kill(first.pid, signal.SIGSTOP)
    second = scheduler(issuer_url, store_url, name, ticks=1)
    try:
        taken = line(second)
        assert taken["token"] > leader["token"]
        assert line(second) == {"tick": 0}
        assert second.wait(timeout=30) == 0
    finally:
        os.kill(first.pid, signal.SIGCONT)
        second.kill()
    # Woken up: its renewal fails (LeaseLost) or its next write is refused.
    out, err = first.communicate(timeout=30)
    assert first.returncode != 0 or "superseded_by" in out, (out, err)
    if first.returncode != 0:
        assert "LeaseLost" in err, err
    # Continued only after the second wrote its tick: a tick of its own
    # accepted after that would be the last record.
    read = fencing.open_store(store_url).get(f"{name}/last-tick")
    assert read is not None and json.loads(read.value)["pid"] == second.pid
