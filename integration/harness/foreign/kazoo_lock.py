# kazoo's Lock (PyPI kazoo 2.11.0), unchanged, driven in lines for the tests
# (fencing_harness::foreign::Client::kazoo):
#   python kazoo_lock.py HOSTS LOCK_PATH SESSION_SECS
# Prints "ready" once it has a session; then, a line each:
#   try      -> "took" (and releases at once) or "busy"
#   take     -> waits up to 20 s, prints its lock node's name; the next
#               line releases it ("released")
#   anything else exits.
import sys
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1], timeout=float(sys.argv[3]))
zk.start(timeout=15)
# kazoo sees our lock nodes only with this pattern.
lock = zk.Lock(sys.argv[2], "kazoo-holder", extra_lock_patterns=["-lock-"])
print("ready", flush=True)
while True:
    command = sys.stdin.readline().strip()
    if command == "try":
        print("took" if lock.acquire(blocking=False) else "busy", flush=True)
        if lock.is_acquired:
            lock.release()
    elif command == "take":
        assert lock.acquire(timeout=20), "kazoo could not take the lock"
        print(lock.node, flush=True)
        sys.stdin.readline()
        lock.release()
        print("released", flush=True)
    else:
        break
zk.stop()
