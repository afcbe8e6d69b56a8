# redis-py's Lock (PyPI redis 8.1.0), unchanged, driven in lines for the
# tests (fencing_harness::foreign::Client::redis_py):
#   python redis_py_lock.py REDIS_URL KEY
# Prints "ready" once connected; then, a line each:
#   try      -> "took" (and releases at once) or "busy"
#   take     -> waits up to 20 s, prints the lock's random value
#   release  -> "released"
#   anything else exits.
import sys
import redis

client = redis.Redis.from_url(sys.argv[1])
client.ping()
lock = client.lock(sys.argv[2], timeout=60)
print("ready", flush=True)
for line in sys.stdin:
    command = line.strip()
    if command == "try":
        if lock.acquire(blocking=False):
            print("took", flush=True)
            lock.release()
        else:
            print("busy", flush=True)
    elif command == "take":
        assert lock.acquire(blocking_timeout=20), "redis-py could not take the lock"
        print(lock.local.token.decode(), flush=True)
    elif command == "release":
        lock.release()  # LockNotOwnedError if its value was changed or deleted
        print("released", flush=True)
    else:
        break
