"""memagent.operator.doors: who API Gateway let through, and what their group may do. The
request contexts are payload 2.0's, as each door's authorizer fills them."""

from __future__ import annotations

import pytest

from memagent.operator.doors import Caller, caller_of, groups_of, needed_for
from memagent.operator.routes import ROUTES, Route

# each route's group, from the routes' table: the seat (operators), export and erase (admins)
SEAT = {route.group for route in ROUTES if route.action not in ("export", "erase")}
ADMIN_ONLY = {route.group for route in ROUTES if route.action in ("export", "erase")}


def jwt_context(**claims: str) -> dict:
    return {"authorizer": {"jwt": {"claims": claims, "scopes": None}}}


def test_an_iam_caller_is_named_by_its_arn_and_iam_decided_what_it_may():
    arn = "arn:aws:iam::123456789012:user/ops"
    caller = caller_of({"authorizer": {"iam": {"userArn": arn, "accountId": "123456789012"}}})
    assert caller == Caller("iam", arn)
    assert all(caller.may(group) for group in (*SEAT, *ADMIN_ONLY))


def test_a_console_caller_is_named_by_username_and_sub_with_the_groups_api_gateway_passes():
    context = jwt_context(
        sub="5f0c-sub", username="ana-uuid", **{"cognito:groups": "[operators admins]"}
    )
    assert caller_of(context) == Caller(
        "console", "ana-uuid", "5f0c-sub", frozenset({"operators", "admins"})
    )
    # an ID token names the user as cognito:username; without either, the sub names them
    assert caller_of(jwt_context(sub="s", **{"cognito:username": "ana"})).name == "ana"
    assert caller_of(jwt_context(sub="s")).name == "s"


@pytest.mark.parametrize(
    ("claim", "groups"),
    [
        ("[operators]", {"operators"}),
        ("[operators admins]", {"operators", "admins"}),
        ("[operators, admins]", {"operators", "admins"}),
        (["admins"], {"admins"}),
        ("[]", set()),
        ("", set()),
        (None, set()),
    ],
)
def test_groups_are_read_as_api_gateway_or_a_json_stand_in_passes_them(claim, groups):
    assert groups_of(claim) == groups


def test_operators_may_use_the_seat_but_not_export_or_erase():
    operator = Caller("console", "ana", "s", frozenset({"operators"}))
    assert all(operator.may(group) for group in SEAT)
    assert not any(operator.may(group) for group in ADMIN_ONLY)
    # the routes only admins may use: export and erase
    admins_only = {(r.method, r.path) for r in ROUTES if not operator.may(r.group)}
    assert admins_only == {("GET", "/people/{id}"), ("DELETE", "/people/{id}")}


def test_admins_may_everything():
    admin = Caller("console", "bo", "s", frozenset({"admins"}))
    assert all(admin.may(route.group) for route in ROUTES)


def test_a_token_in_no_known_group_may_do_nothing():
    for groups in (frozenset(), frozenset({"operator"}), frozenset({"Admins"})):
        stranger = Caller("console", "cy", "s", groups)
        assert not any(stranger.may(route.group) for route in ROUTES)


def test_a_refusal_names_the_groups_that_may():
    assert needed_for("admins") == "admins"
    assert needed_for("operators") == "operators or admins"


def test_a_group_nobody_chose_is_no_group_and_fails_closed():
    # a group the doors do not know lets no console caller in
    admin = Caller("console", "bo", "s", frozenset({"admins", "operators"}))
    assert not admin.may("")
    assert not admin.may("Operators")
    # and a route declared without a known group, or without an audit action, fails at import
    for group, action in (("", "read"), ("everyone", "read"), ("operators", "")):
        with pytest.raises(ValueError, match=r"GET /people/\{id\}/x"):
            Route("GET", "/people/{id}/x", group, action, lambda seat, r: {})


def test_no_authorizer_no_caller():
    # the console's page (GET /) and anything API Gateway passed without an authorizer
    assert caller_of({}) is None
    assert caller_of({"authorizer": {}}) is None
    assert caller_of({"authorizer": {"iam": {}}}) is None
    assert caller_of(jwt_context(username="no-sub")) is None
