"""What happens to a Python process holding a lease: paused past its TTL
(Figure 9-6 of Designing Data-Intensive Applications), interrupted,
forked, exiting, and other threads running while it waits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import fencing
from conftest import ISSUERS, STORES, unique


def python(code: str) -> subprocess.Popen[str]:
    """`code` in a Python process of its own, lines on stdout."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_paused_holder_s_late_write_is_refused() -> None:
    """Client 1 takes the lease, is stopped (SIGSTOP) past its TTL; client 2
    takes the lease and writes; client 1, continued, writes with its old
    token and the store refuses it with nothing written."""
    issuer_url, store_url = ISSUERS["etcd"](""), STORES["postgres"]("")
    resource, key = unique("res"), unique("key")
    client1 = python(
        f"""
        import json, sys, fencing
        issuer, store = fencing.open_issuer({issuer_url!r}), fencing.open_store({store_url!r})
        lease = issuer.acquire({resource!r}, ttl=2)
        print(json.dumps({{"token": lease.token}}), flush=True)
        sys.stdin.readline()  # stopped here, then continued
        try:
            store.put({key!r}, b"from client 1", lease.token)
            print(json.dumps({{"written": True}}), flush=True)
        except fencing.StaleToken as e:
            print(json.dumps({{"presented": e.presented, "current": e.current}}), flush=True)
        """
    )
    assert client1.stdout is not None and client1.stdin is not None
    token1 = json.loads(client1.stdout.readline())["token"]
    os.kill(client1.pid, signal.SIGSTOP)
    try:
        issuer, store = fencing.open_issuer(issuer_url), fencing.open_store(store_url)
        lease2 = issuer.acquire(resource, ttl=10, wait=15)
        assert lease2.token > token1
        store.put(key, b"from client 2", lease2.token)
    finally:
        os.kill(client1.pid, signal.SIGCONT)
    client1.stdin.write("go\n")
    client1.stdin.flush()
    answer = json.loads(client1.stdout.readline())
    assert answer == {"presented": token1, "current": lease2.token}, client1.stderr
    read = store.get(key)
    assert read is not None and read.value == b"from client 2"
    assert client1.wait(timeout=30) == 0
    issuer.release(lease2)


def test_the_interpreter_exits_cleanly_with_leases_held() -> None:
    """A lock left entered, a lease never released, a store open: exit 0,
    at once, with nothing on stderr (no abort from a runtime thread)."""
    child = python(
        f"""
        import fencing
        issuer = fencing.open_issuer({ISSUERS["etcd"]("")!r})
        held = issuer.lock({unique("res")!r}, ttl=10).__enter__()
        lease = issuer.acquire({unique("res")!r}, ttl=10)
        store = fencing.open_store({STORES["postgres"]("")!r})
        print(held.token, lease.token, flush=True)
        """
    )
    started = time.monotonic()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0 and len(out.split()) == 2, (out, err)
    assert err == "", err
    # Process start and four connections included; a wait for a lease's
    # TTL (10 s) or a hang at shutdown would show.
    assert time.monotonic() - started < 8


def test_ctrl_c_interrupts_a_long_wait() -> None:
    url, resource = ISSUERS["etcd"](""), unique("res")
    etcd = fencing.open_issuer(url)
    lease = etcd.acquire(resource, ttl=30)
    # Ctrl-C's handler set explicitly: a process started in the background
    # by a non-interactive shell (`cmd &`, as a CI runner may start this
    # suite) inherits SIGINT ignored, and Python then installs no handler.
    child = python(
        f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import fencing
        issuer = fencing.open_issuer({url!r})
        print("waiting", flush=True)
        try:
            issuer.acquire({resource!r}, ttl=10, wait=60)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "waiting"
    time.sleep(0.3)
    started = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        out, err = child.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        # Say where it hung (in the wait, or on the way out after it).
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"no exit 10 s after SIGINT: stdout {out!r}, stderr {err!r}")
    assert time.monotonic() - started < 5
    etcd.release(lease)
    assert "interrupted" in out or "KeyboardInterrupt" in err, (out, err)


def test_other_threads_run_while_a_call_waits(etcd: fencing.Issuer) -> None:
    resource = unique("res")
    lease = etcd.acquire(resource, ttl=30)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    try:
        with pytest.raises(fencing.Timeout):
            etcd.acquire(resource, ttl=10, wait=1.0)
    finally:
        done.set()
        counter.join()
    etcd.release(lease)
    # At a tick a millisecond, most of the second: not a GIL held throughout.
    assert ticks > 200, ticks


def test_a_forked_child_must_open_its_own_issuer() -> None:
    """The child gets an error naming the fork from the parent's issuer and
    lease, opens its own, and leaving the parent's `with` block in the
    child does not release the parent's lease."""
    url, resource = ISSUERS["etcd"](""), unique("res")
    etcd = fencing.open_issuer(url)
    read, write = os.pipe()
    lock = etcd.lock(resource, ttl=10)
    with lock as held:
        pid = os.fork()
        if pid == 0:  # the child: report, then leave without running the parent's cleanup
            report: dict[str, object] = {}
            try:
                for name, use in [
                    ("issuer", lambda: etcd.try_acquire(unique("res"), ttl=10)),
                    ("held", lambda: held.token),
                ]:
                    try:
                        use()
                        report[name] = "worked"
                    except fencing.FencingError as e:
                        report[name] = str(e)
                # Leaving the block here must not release the parent's lease.
                report["exit"] = lock.__exit__(None, None, None)
                mine = fencing.open_issuer(url)
                lease = mine.acquire(unique("res"), ttl=10)
                mine.release(lease)
                report["own"] = lease.token
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                report["error"] = repr(e)
            finally:
                os.write(write, json.dumps(report).encode())
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(pid, 0)
        held.check()
        holding = etcd.holder(resource)
        assert holding is not None and holding.token == held.token
    assert "os.fork()" in str(report["issuer"]) and "os.fork()" in str(report["held"]), report
    assert report.get("exit") is False and isinstance(report.get("own"), int), report


def test_check_sees_a_pause_past_the_ttl_at_once() -> None:
    """Continued after a pause longer than the TTL, `held.check()` raises
    before anything else runs: the deadline, not only the keep-alive's
    verdict, which a worker thread may not have reached yet."""
    child = python(
        f"""
        import sys, fencing
        issuer = fencing.open_issuer({ISSUERS["etcd"]("")!r})
        with issuer.lock({unique("res")!r}, ttl=2) as held:
            print("held", flush=True)
            sys.stdin.readline()
            try:
                held.check()
                print("not lost", flush=True)
            except fencing.LeaseLost:
                print("lost", held.lost, flush=True)
        """
    )
    assert child.stdout is not None and child.stdin is not None
    assert child.stdout.readline().strip() == "held"
    os.kill(child.pid, signal.SIGSTOP)
    time.sleep(3)
    os.kill(child.pid, signal.SIGCONT)
    child.stdin.write("go\n")
    child.stdin.flush()
    out, err = child.communicate(timeout=30)
    assert out.strip() == "lost True", (out, err)


def test_no_write_is_sent_with_the_token_of_a_lease_lost_in_a_pause() -> None:
    """Inside `async with`, the process is stopped past its TTL (the event
    loop blocked reading stdin, then SIGSTOP) while another holder takes the
    lease; continued, the block's next write with `held.token` (or
    `held.lease` as the token) is not sent: it raises LeaseLost, before the
    keep-alive or the block's watcher has run. The write is a plain `store.put` (what the README's
    async example does), which nothing else can stop; an awaited one may be
    cancelled by the watcher first. Seen failing: the put landed on a key
    nobody had fenced yet."""
    issuer_url, store_url = ISSUERS["etcd"](""), STORES["postgres"]("")
    resource, key = unique("res"), unique("key")
    child = python(
        f"""
        import asyncio, sys, fencing, fencing.aio
        async def main():
            issuer = await fencing.aio.open_issuer({issuer_url!r})
            store = fencing.open_store({store_url!r})
            async with issuer.lock({resource!r}, ttl=2) as held:
                print("held", held.token, flush=True)
                sys.stdin.readline()  # the loop blocked: stopped here, then continued
                for how in ("token", "lease"):
                    try:
                        store.put({key!r}, b"late", getattr(held, how))
                        print("written", flush=True)
                    except fencing.LeaseLost:
                        print("lost", flush=True)
        try:
            asyncio.run(main())
        except fencing.LeaseLost:
            pass
        """
    )
    assert child.stdout is not None and child.stdin is not None
    first = child.stdout.readline().split()
    assert first and first[0] == "held", (first, child.stderr)
    os.kill(child.pid, signal.SIGSTOP)
    try:
        issuer = fencing.open_issuer(issuer_url)
        lease2 = issuer.acquire(resource, ttl=10, wait=15)
        assert lease2.token > int(first[1])
    finally:
        os.kill(child.pid, signal.SIGCONT)
    child.stdin.write("go\n")
    child.stdin.flush()
    out, err = child.communicate(timeout=30)
    assert out.split() == ["lost", "lost"], (out, err)
    assert fencing.open_store(store_url).get(key) is None, "the late put landed"
    issuer.release(lease2)
