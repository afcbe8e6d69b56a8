"""What the pytest suite shares: the servers of integration/services.sh by
URL, fresh names, and buckets on the emulators.

A server the suite needs and cannot find fails the test with how to start
it; nothing is skipped.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import urllib.request
import uuid
from collections.abc import Callable
from email.utils import formatdate

import pytest

import fencing

START = "start it with `integration/services.sh up all` and `eval \"$(integration/services.sh env)\"`"


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: {START}", pytrace=False)
    return value


def unique(what: str = "py") -> str:
    """A name no other test or run uses."""
    return f"{what}-{uuid.uuid4().hex[:12]}"


def s3_bucket() -> str:
    """A fresh bucket on the S3 emulator (moto takes an unsigned PUT)."""
    endpoint, name = env("FENCING_S3_ENDPOINT"), unique("py-s3")
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{name}", method="PUT"), timeout=10)
    return f"s3://{name}?endpoint={endpoint}&emulator=true"


def gcs_bucket() -> str:
    """A fresh bucket on fake-gcs-server, through its JSON API."""
    endpoint, name = env("FENCING_GCS_ENDPOINT"), unique("py-gcs")
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=test",
        data=json.dumps({"name": name}).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10)
    return f"gs://{name}?endpoint={endpoint}&emulator=true"


# Azurite's development account and its published key (not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def azure_container() -> str:
    """A fresh container on Azurite: a Create Container request signed with
    the development account's Shared Key."""
    endpoint, name = env("FENCING_AZURE_ENDPOINT"), unique("py-az")
    date, version = formatdate(usegmt=True), "2021-08-06"
    canonical_headers = f"x-ms-date:{date}\nx-ms-version:{version}\n"
    # Path-style (the emulator's URL holds the account): the account twice.
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    to_sign = "PUT\n" + "\n" * 11 + canonical_headers + resource
    signature = base64.b64encode(
        hmac.new(base64.b64decode(AZURITE_KEY), to_sign.encode(), hashlib.sha256).digest()
    ).decode()
    request = urllib.request.Request(
        f"{endpoint}/{name}?restype=container",
        method="PUT",
        headers={
            "x-ms-date": date,
            "x-ms-version": version,
            "Authorization": f"SharedKey {AZURITE_ACCOUNT}:{signature}",
        },
    )
    urllib.request.urlopen(request, timeout=10)
    return f"az://{name}?endpoint={endpoint}&emulator=true"


def dynamodb_table() -> str:
    return f"dynamodb://{unique('py-ddb')}?endpoint={env('FENCING_DYNAMODB_ENDPOINT')}&emulator=true&create_table=true"


def sqlite_url(tmp: str) -> str:
    return f"sqlite://{tmp}/fencing.db?mode=rwc"


# Each backend's URL, made when a test asks for it (a bucket per test). The
# keys are integration/src/backends' names for each role; the Rust test
# integration/tests/adding_a_backend.rs fails when they drift.
ISSUERS: dict[str, Callable[[str], str]] = {
    "etcd": lambda _: f"etcd://{env('FENCING_ETCD_ENDPOINTS').removeprefix('http://')}?prefix={unique()}/",
    "zookeeper": lambda _: f"zk://{env('FENCING_ZK_ADDR')}/{unique()}",
    # The append-only Redis: the issuer refuses one that can lose its counter.
    "redis": lambda _: f"{env('FENCING_REDIS_AOF_URL')}?prefix={unique()}:",
    "postgres": lambda _: env("FENCING_PG_URL"),
    "mariadb": lambda _: env("FENCING_MYSQL_URL"),
    "sqlite": sqlite_url,
    "dynamodb": lambda _: dynamodb_table(),
    "s3": lambda _: s3_bucket(),
    "gcs": lambda _: gcs_bucket(),
    "azure": lambda _: azure_container(),
}

STORES: dict[str, Callable[[str], str]] = {
    "postgres": lambda _: env("FENCING_PG_URL"),
    "mariadb": lambda _: env("FENCING_MYSQL_URL"),
    "sqlite": sqlite_url,
    "dynamodb": lambda _: dynamodb_table(),
    "s3": lambda _: s3_bucket(),
    "gcs": lambda _: gcs_bucket(),
    "azure": lambda _: azure_container(),
}


@pytest.fixture(params=sorted(ISSUERS))
def issuer(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> fencing.Issuer:
    return fencing.open_issuer(ISSUERS[request.param](str(tmp_path)))


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> fencing.Store:
    return fencing.open_store(STORES[request.param](str(tmp_path)))


@pytest.fixture
def etcd() -> fencing.Issuer:
    return fencing.open_issuer(ISSUERS["etcd"](""))


@pytest.fixture
def postgres() -> fencing.Store:
    return fencing.open_store(STORES["postgres"](""))
