"""The server's API keys on every backend: added with a secret shown once, listed,
authenticated by their secret, revoked; only the secret's hash is stored."""

from __future__ import annotations

import hashlib
import sqlite3

import psycopg
import pytest

import sluice
from sluice.clock import ManualClock
from sluice.server.grants import USED_EVERY, Grant, KeyInfo, Keys, Principal
from tests.conftest import schema_of

T0 = 1_800_000_000.0


@pytest.fixture
def keys(db: sluice.Database, clock: ManualClock) -> Keys:
    return Keys(db)


def table(backend_url: str) -> list[tuple[object, ...]]:
    """Every row of api_keys, every column, read on a connection of the test's own."""
    if backend_url.startswith("sqlite:///"):
        with sqlite3.connect(backend_url.removeprefix("sqlite:///")) as conn:
            return conn.execute("SELECT * FROM api_keys ORDER BY name").fetchall()
    if backend_url.startswith("postgresql"):
        query = f'SELECT * FROM "{schema_of(backend_url)}".api_keys ORDER BY name'
        with psycopg.connect(backend_url.partition("?")[0], autocommit=True) as conn:
            return conn.execute(query).fetchall()
    pytest.skip("memory:// is private to its Database: no way in to read its table")


def grants(*texts: str) -> list[Grant]:
    return [Grant.parse(t) for t in texts]


def test_a_key_added_authenticates_with_its_secret(keys: Keys) -> None:
    secret = keys.add("orders-app", grants("orders*:produce,consume", "audit:browse"))
    assert secret.startswith("sk_")
    assert len(secret) == len("sk_") + 43  # 32 random bytes, base64url without padding
    assert keys.authenticate(secret) == Principal(
        "orders-app",
        admin=False,
        grants=(
            Grant("orders*", frozenset({"produce", "consume"})),
            Grant("audit", frozenset({"browse"})),
        ),
    )


def test_every_key_has_its_own_secret(keys: Keys) -> None:
    first = keys.add("a", grants("q:browse"))
    second = keys.add("b", grants("q:browse"))
    assert first != second
    assert (p := keys.authenticate(first)) is not None
    assert p.name == "a"
    assert (p := keys.authenticate(second)) is not None
    assert p.name == "b"


@pytest.mark.parametrize(
    "secret",
    ["", "sk_", "sk_nothing-like-it", "Bearer sk_x", "not even our prefix"],
)
def test_a_secret_no_key_has_authenticates_nobody(keys: Keys, secret: str) -> None:
    keys.add("app", grants("q:browse"))
    assert keys.authenticate(secret) is None


def test_a_secret_one_character_off_authenticates_nobody(keys: Keys) -> None:
    secret = keys.add("app", grants("q:browse"))
    last = "A" if secret[-1] != "A" else "B"
    assert keys.authenticate(secret[:-1] + last) is None
    assert keys.authenticate(secret + "x") is None
    assert keys.authenticate(secret.upper()) is None


def test_grants_come_back_from_the_store_as_given(keys: Keys) -> None:
    secret = keys.add("app", grants("orders*:produce", "q?[x]:consume", "eu:orders:browse"))
    principal = keys.authenticate(secret)
    assert principal is not None
    assert principal.allows("orders", "produce")
    assert principal.allows("orders.eu", "produce")
    assert not principal.allows("my-orders", "produce")
    assert not principal.allows("orders", "consume")
    # ? and [ are themselves, stored or not.
    assert principal.allows("q?[x]", "consume")
    assert not principal.allows("q1x", "consume")
    assert not principal.allows("q1", "consume")
    # The pattern ends at the last colon.
    assert principal.allows("eu:orders", "browse")
    assert not principal.allows("eu", "browse")
    for action in ("manage", "browse"):
        assert not principal.allows("orders", action)


def test_an_admin_key_may_do_everything(keys: Keys) -> None:
    secret = keys.add("ops", [], admin=True)
    principal = keys.authenticate(secret)
    assert principal is not None
    assert principal.admin
    assert all(principal.allows(q, a) for q in ("orders", "x.y") for a in ("manage", "consume"))
    grantless = keys.add("app", grants("orders:browse"))
    found = keys.authenticate(grantless)
    assert found is not None
    assert not found.admin
    assert not found.allows("orders", "manage")


def test_a_key_that_would_allow_nothing_is_refused(keys: Keys) -> None:
    with pytest.raises(sluice.ConfigurationError, match="would allow nothing"):
        keys.add("idle", [])
    assert keys.list() == []


def test_the_list_shows_every_key_by_name_without_secrets(keys: Keys, clock: ManualClock) -> None:
    secret = keys.add("zeta", grants("orders*:produce,consume"))
    clock.advance(5)
    keys.add("alpha", [], admin=True)
    listed = keys.list()
    assert listed == [
        KeyInfo("alpha", (), True, T0 + 5, None, None),
        KeyInfo(
            "zeta", (Grant("orders*", frozenset({"produce", "consume"})),), False, T0, None, None
        ),
    ]
    assert not any(k.revoked for k in listed)
    shown = [k.as_dict() for k in listed]
    assert shown[1] == {
        "name": "zeta",
        "grants": ["orders*:consume,produce"],
        "admin": False,
        "created_at": T0,
        "used_at": None,
        "revoked_at": None,
    }
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in repr(listed) + repr(shown)
    assert digest not in repr(listed) + repr(shown)


def test_use_is_marked_at_most_every_minute(keys: Keys, clock: ManualClock) -> None:
    secret = keys.add("app", grants("q:browse"))
    clock.advance(10)
    assert keys.authenticate(secret) is not None
    assert keys.list()[0].used_at == T0 + 10
    clock.advance(USED_EVERY - 1)
    assert keys.authenticate(secret) is not None
    assert keys.list()[0].used_at == T0 + 10  # within the minute: not marked again
    clock.advance(1)
    assert keys.authenticate(secret) is not None
    assert keys.list()[0].used_at == T0 + 10 + USED_EVERY


def test_a_revoked_key_authenticates_nobody_and_stays_listed(
    keys: Keys, clock: ManualClock
) -> None:
    revoked = keys.add("old", grants("q:consume"))
    kept = keys.add("new", grants("q:consume"))
    clock.advance(30)
    keys.revoke("old")
    assert keys.authenticate(revoked) is None
    assert keys.authenticate(kept) is not None
    by_name = {k.name: k for k in keys.list()}
    assert by_name["old"].revoked
    assert by_name["old"].revoked_at == T0 + 30
    assert not by_name["new"].revoked
    # Revoking again changes nothing: it stays revoked as of the first time.
    clock.advance(30)
    keys.revoke("old")
    assert {k.name: k for k in keys.list()}["old"].revoked_at == T0 + 30
    assert keys.authenticate(revoked) is None


def test_revoking_a_key_nobody_added_says_so(keys: Keys) -> None:
    keys.add("app", grants("q:browse"))
    with pytest.raises(sluice.KeyNotFound, match="no API key named 'ap'"):
        keys.revoke("ap")
    assert not keys.list()[0].revoked


def test_a_name_is_taken_once_even_after_revoking(keys: Keys) -> None:
    secret = keys.add("app", grants("q:browse"))
    with pytest.raises(sluice.ConfigurationError, match="'app' exists already"):
        keys.add("app", grants("q:consume"))
    keys.revoke("app")
    with pytest.raises(sluice.ConfigurationError, match="'app' exists already"):
        keys.add("app", grants("q:consume"))
    assert [k.name for k in keys.list()] == ["app"]
    assert keys.list()[0].grants == (Grant("q", frozenset({"browse"})),)
    assert keys.authenticate(secret) is None


@pytest.mark.parametrize(
    "name", ["", "a" * 65, "bad name", "a/b", "a:b", "ключ", "a\n", "*", "sk_x?"]
)
def test_bad_names_are_refused(keys: Keys, name: str) -> None:
    with pytest.raises(sluice.ConfigurationError, match="invalid API key name"):
        keys.add(name, grants("q:browse"))
    assert keys.list() == []


def test_names_of_letters_digits_and_punctuation_up_to_64_are_taken(keys: Keys) -> None:
    names = ["a", "A-b_c.9", "-dash", ".dot", "x" * 64]
    for name in names:
        keys.add(name, grants("q:browse"))
    assert sorted(k.name for k in keys.list()) == sorted(names)


def test_the_secret_is_never_stored_only_its_hash(keys: Keys, backend_url: str) -> None:
    secret = keys.add("app", grants("orders*:produce"))
    admin = keys.add("ops", [], admin=True)
    rows = table(backend_url)
    assert [(r[0], r[1]) for r in rows] == [
        ("app", hashlib.sha256(secret.encode()).hexdigest()),
        ("ops", hashlib.sha256(admin.encode()).hexdigest()),
    ]
    everything = repr(rows)
    for s in (secret, admin):
        assert s not in everything
        assert s.removeprefix("sk_") not in everything


def test_keys_outlive_the_connection_that_added_them(backend_url: str) -> None:
    if backend_url.startswith("memory"):
        pytest.skip("memory:// ends with its Database")
    with sluice.connect(backend_url) as first:
        secret = Keys(first).add("app", grants("q:browse"))
    with sluice.connect(backend_url) as second:
        principal = Keys(second).authenticate(secret)
    assert principal is not None
    assert principal.name == "app"
