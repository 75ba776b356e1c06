"""memagent/operator/routes.py, the one table of admin routes, and what is written from it:
docs/operator.md's route table names only routes the table declares, with their methods; the
CLI's operator verbs (scripts/people.py) are the table's; a route declared twice, or two routes
with one verb, fail at import. (docs/admin-api.yaml: test_admin_api_doc.py; template.yaml's
events: tests/infra/test_template.py; the groups: test_doors.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memagent.operator import routes
from memagent.operator.routes import ROUTES, Route

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_MD = ROOT / "docs" / "operator.md"


def routes_named(markdown: str) -> set[tuple[str, str]]:
    """The (METHOD, path) pairs of the route table under "## The admin API": a first cell such
    as "`GET` / `POST /people/{id}/facts`, `PUT` / `DELETE /people/{id}/facts/{fact}`"."""
    section = markdown.split("## The admin API", 1)[1].split("\n## ", 1)[0]
    table = section[section.index("| route") :].split("\n\n", 1)[0]
    named = set()
    for row in table.splitlines()[2:]:
        first = row.split("|")[1].replace("`", "")
        for group in first.split(","):
            methods = re.findall(r"\b(GET|POST|PUT|DELETE)\b", group)
            path = re.search(r"(/[\w{}-][\w{}/-]*)", group)  # not the " / " between methods
            assert methods and path, f"a row of operator.md's route table names no route: {row}"
            named |= {(method, path.group(1)) for method in methods}
    return named


def test_operator_md_names_only_routes_the_table_declares() -> None:
    named = routes_named(OPERATOR_MD.read_text())
    declared = {(route.method, route.path) for route in ROUTES}
    assert len(named) >= 10  # the parse found the table
    assert named - declared == set()


def test_a_route_the_table_lacks_is_caught_in_operator_md() -> None:
    # given the page with a route nobody declared
    page = OPERATOR_MD.read_text().replace(
        "`GET /handoffs`", "`GET /handoffs`, `PATCH` / `GET /nope`"
    )
    # then the check names it
    assert ("GET", "/nope") in routes_named(page) - {(r.method, r.path) for r in ROUTES}


def test_the_cli_verbs_are_the_tables() -> None:
    from scripts.people import OPERATOR_VERBS
    from scripts.people import ROUTES as VERBS

    assert {r.verb: (r.method, r.path) for r in ROUTES if r.verb} == VERBS
    assert set(OPERATOR_VERBS) == {r.verb for r in ROUTES if r.verb}


def test_a_route_declared_twice_or_a_verb_used_twice_is_refused() -> None:
    def call(seat, r):
        return {}

    one = Route("GET", "/handoffs", "operators", "list_handoffs", call, verb="waiting")
    with pytest.raises(ValueError, match="declared twice"):
        routes._one_each((one, Route("GET", "/handoffs", "operators", "read", call)))
    with pytest.raises(ValueError, match="two routes"):
        routes._one_each((one, Route("GET", "/other", "operators", "read", call, verb="waiting")))
    routes._one_each(ROUTES)  # the table itself passes
