"""Grants: their text as the CLI takes it, and which queues and actions they allow."""

from __future__ import annotations

import pytest

from sluice.errors import ConfigurationError
from sluice.server.grants import ACTIONS, Grant, Principal


@pytest.mark.parametrize(
    ("text", "pattern", "actions"),
    [
        ("orders*:produce,consume", "orders*", {"produce", "consume"}),
        ("audit:browse", "audit", {"browse"}),
        (" orders* : produce , manage ", "orders*", {"produce", "manage"}),
        ("*:produce,consume,browse,manage", "*", ACTIONS),
        # Queue names may hold colons: the actions follow the last one.
        ("eu:orders:*:consume", "eu:orders:*", {"consume"}),
        ("a:browse,browse", "a", {"browse"}),
    ],
)
def test_grants_parse_from_their_text(text: str, pattern: str, actions: set[str]) -> None:
    grant = Grant.parse(text)
    assert (grant.pattern, grant.actions) == (pattern, frozenset(actions))
    assert Grant.parse(str(grant)) == grant


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("orders*", "has no colon"),
        ("", "has no colon"),
        (":produce", "needs a queue name pattern"),
        ("  :produce", "needs a queue name pattern"),
        ("orders:", "allows nothing"),
        ("orders: , ", "allows nothing"),
        ("orders:produce,fly", "unknown action(s) 'fly'"),
        ("orders:Produce", "unknown action(s) 'Produce'"),
        ("orders:produce consume", "unknown action(s) 'produce consume'"),
    ],
)
def test_bad_grant_text_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Grant.parse(text)
    assert message in str(caught.value)


def test_a_grant_made_directly_is_checked_too() -> None:
    with pytest.raises(ConfigurationError, match="unknown action"):
        Grant("orders", frozenset({"delete"}))
    with pytest.raises(ConfigurationError, match="needs a queue name pattern"):
        Grant("", frozenset({"browse"}))


@pytest.mark.parametrize(
    ("pattern", "queue", "matches"),
    [
        ("orders", "orders", True),
        ("orders", "orders2", False),
        ("orders", "Orders", False),  # names are case-sensitive
        ("orders", "my-orders", False),
        ("orders*", "orders", True),  # * matches no characters too
        ("orders*", "orders.eu", True),
        ("orders*", "my-orders", False),
        ("*orders", "my-orders", True),
        ("*.errors", "orders.errors", True),
        ("*.errors", "orders.errors.old", False),
        ("a*b*c", "a-x-b-y-c", True),
        ("a*b*c", "a-x-c", False),
        ("*", "anything:at.all", True),
        # Only * is special: ? and [ stand for themselves.
        ("q?", "q?", True),
        ("q?", "q1", False),
        ("q[12]", "q[12]", True),
        ("q[12]", "q1", False),
        ("q[!x]*", "q[!x]-1", True),
        ("q[!x]*", "qa", False),
        ("q]", "q]", True),
    ],
)
def test_patterns_match_whole_names_with_star_the_only_wildcard(
    pattern: str, queue: str, matches: bool
) -> None:
    assert Grant(pattern, frozenset({"browse"})).matches(queue) is matches


def test_a_principal_is_allowed_what_one_grant_gives_on_its_queues() -> None:
    principal = Principal(
        "app",
        admin=False,
        grants=(Grant.parse("orders*:produce"), Grant.parse("orders.eu:consume,browse")),
    )
    assert principal.allows("orders", "produce")
    assert principal.allows("orders.eu", "produce")
    assert principal.allows("orders.eu", "consume")
    assert not principal.allows("orders", "consume")
    assert not principal.allows("orders.us", "browse")
    assert not principal.allows("invoices", "produce")
    assert not principal.allows("orders", "manage")


def test_a_principal_without_grants_is_allowed_nothing_and_an_admin_everything() -> None:
    nobody = Principal("nobody", admin=False, grants=())
    admin = Principal("ops", admin=True, grants=())
    for action in ACTIONS:
        assert not nobody.allows("orders", action)
        assert admin.allows("orders", action)


def test_an_unknown_action_is_a_mistake_of_the_caller() -> None:
    admin = Principal("ops", admin=True, grants=())
    with pytest.raises(ValueError, match="unknown action 'delete'"):
        admin.allows("orders", "delete")
