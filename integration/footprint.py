#!/usr/bin/env python3
"""What each resource name and each key leaves on the servers, measured.

The figures of docs/running-for-months.md come from this program. It runs
the real `fence` binary against the servers `integration/services.sh`
starts (redis-aof, postgres, etcd, zookeeper, s3, dynamodb) and reads each
server's own account of what is left:

    eval "$(integration/services.sh env)"
    integration/.state/tools/venv/bin/python integration/footprint.py target/debug/fence

Per name: one grant and one release, then what stays. Per etcd cycle: the
growth of etcd's database over many grants and releases of one name,
uncompacted. Per key: one put of a one-byte value and what stays.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import boto3
import redis
from kazoo.client import KazooClient

FENCE = sys.argv[1] if len(sys.argv) > 1 else "target/debug/fence"
RUN = uuid.uuid4().hex[:8]


def fence(*args):
    out = subprocess.run([FENCE, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"fence {' '.join(args)}: exit {out.returncode}: {out.stderr}")
    return out.stdout


def cycle(issuer, name):
    """One grant and one release, in one process (a ZooKeeper lease ends
    with its session)."""
    fence("run", "--issuer", issuer, "--resource", name, "--", "true")


def env(var):
    value = os.environ.get(var)
    if not value:
        raise SystemExit(f"{var} is unset: eval \"$(integration/services.sh env)\" first")
    return value


def report(what, figure):
    print(f"{what}: {figure}")


def redis_figures():
    url = env("FENCING_REDIS_AOF_URL")
    client = redis.Redis.from_url(url)
    name = f"footprint-{RUN}"
    cycle(url, name)
    left = sorted(k.decode() for k in client.keys(f"fencing:{name}*"))
    usage = sum(client.memory_usage(k) for k in left)
    report("redis issuer, per name", f"{left} = {usage} bytes of memory (MEMORY USAGE)")


def postgres_figures():
    url = env("FENCING_PG_URL")
    name = f"footprint-{RUN}"
    cycle(url, name)
    row = subprocess.run(
        ["psql", url, "-tAc",
         f"SELECT pg_column_size(l.*), octet_length(resource) FROM fencing_leases l WHERE resource = '{name}'"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    size, key = row.split("|")
    report("postgres issuer, per name", f"one row of {size} bytes (pg_column_size; the name is {key}), plus its primary-key index entry")
    fence("put", "--store", url, f"footprint-key-{RUN}", "--token", "5", "x")
    row = subprocess.run(
        ["psql", url, "-tAc",
         f"SELECT pg_column_size(r.*) FROM fencing_records r WHERE k = 'footprint-key-{RUN}'"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    report("postgres store, per key", f"one row of {row} bytes (pg_column_size), kept after a delete with its value null")


def etcd_figures(cycles=300):
    endpoint = env("FENCING_ETCD_ENDPOINTS").split(",")[0]
    issuer = "etcd://" + endpoint.split("://")[-1]
    name = f"footprint-{RUN}"

    def status():
        out = subprocess.run(
            ["etcdctl", "--endpoints", endpoint, "endpoint", "status", "-w", "json"],
            capture_output=True, text=True, check=True,
        ).stdout
        header = json.loads(out)[0]["Status"]
        return header["header"]["revision"], header["dbSize"], header.get("dbSizeInUse", 0)

    rev0, size0, use0 = status()
    for _ in range(cycles):
        cycle(issuer, name)
    rev1, size1, use1 = status()
    per_cycle = (use1 - use0) / cycles if use1 else (size1 - size0) / cycles
    report(
        "etcd issuer, per grant and release",
        f"{rev1 - rev0} revisions over {cycles} cycles; {per_cycle:.0f} bytes of database in use each, uncompacted",
    )
    left = subprocess.run(
        ["etcdctl", "--endpoints", endpoint, "get", "--prefix", "--keys-only", f"fencing/{name}"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    report("etcd issuer, per name", f"{len(left)} keys left after release")


def zookeeper_figures(names=50):
    addr = env("FENCING_ZK_ADDR")
    issuer = f"zookeeper://{addr}"
    zk = KazooClient(hosts=addr)
    zk.start()
    before = set(zk.get_children("/fencing")) if zk.exists("/fencing") else set()
    for i in range(names):
        cycle(issuer, f"footprint-{RUN}-{i}")
    one = f"/fencing/footprint-{RUN}-0"
    children = zk.get_children(one)
    data, stat = zk.get(one)
    added = set(zk.get_children("/fencing")) - before
    zk.stop()
    report(
        "zookeeper issuer, per name",
        f"{len(added) // names} resource znode + {children} (persistent; data {len(data)} bytes)",
    )


def s3_figures():
    endpoint = env("FENCING_S3_ENDPOINT")
    bucket = f"footprint-{RUN}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="test",
        aws_secret_access_key="test", region_name="us-east-1",
    )
    s3.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}?endpoint={endpoint}&emulator=true"
    cycle(url, "task-1")
    for obj in s3.list_objects_v2(Bucket=bucket)["Contents"]:
        report("bucket lease issuer (s3, gcs, azure), per name", f"one object {obj['Key']} of {obj['Size']} bytes")
    fence("put", "--store", url, "some-key", "--token", "5", "x")
    head = s3.head_object(Bucket=bucket, Key="some-key")
    report("bucket store, per key", f"one object of {head['ContentLength']} bytes (a one-byte value); a delete leaves a tombstone")


def dynamodb_figures():
    endpoint = env("FENCING_DYNAMODB_ENDPOINT")
    table = f"footprint-{RUN}"
    url = f"dynamodb://{table}?endpoint={endpoint}&emulator=true&create_table=true"
    cycle(url, "task-1")
    db = boto3.client(
        "dynamodb", endpoint_url=endpoint, aws_access_key_id="test",
        aws_secret_access_key="test", region_name="us-east-1",
    )
    for item in db.scan(TableName=table)["Items"]:
        # DynamoDB's item size: attribute names plus values (a number is
        # about one byte per two digits plus one).
        size = 0
        for attr, value in item.items():
            size += len(attr.encode())
            if "S" in value:
                size += len(value["S"].encode())
            elif "N" in value:
                size += (len(value["N"]) + 1) // 2 + 1
        report("dynamodb issuer, per name", f"one item of {size} bytes by DynamoDB's count ({sorted(item)})")


def main():
    for measure in (redis_figures, postgres_figures, etcd_figures, zookeeper_figures, s3_figures, dynamodb_figures):
        started = time.monotonic()
        measure()
        print(f"  ({measure.__name__} took {time.monotonic() - started:.1f}s)", file=sys.stderr)


if __name__ == "__main__":
    main()
