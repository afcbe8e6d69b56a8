# python-etcd3's Lock (PyPI etcd3 0.12.0), unchanged, driven in lines for the
# tests (fencing_harness::foreign::Client::python_etcd3):
#   python python_etcd3.py ENDPOINT NAME TTL_SECS
# Its key is /locks/NAME. Prints "ready"; then, a line each:
#   try      -> "took" (and releases at once) or "busy"
#   take     -> waits up to 20 s, prints KEY@LEASE: its key and its lease id
#               in hex, what `fence token --key` names this holder by
#   release  -> "released", or "lost" if the key is no longer its own
#   anything else exits.
import sys, etcd3
host, port = sys.argv[1].rsplit("/", 1)[-1].rsplit(":", 1)
lock = etcd3.client(host, int(port)).lock(sys.argv[2], ttl=int(sys.argv[3]))
print("ready", flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "try":
        if lock.acquire(timeout=0):
            print("took", flush=True)
            lock.release()
        else:
            print("busy", flush=True)
    elif command == "take":
        assert lock.acquire(timeout=20), "python-etcd3 could not take the lock"
        print(f"{lock.key}@{lock.lease.id:x}", flush=True)
    elif command == "release":
        print("released" if lock.release() else "lost", flush=True)
    else:
        break
