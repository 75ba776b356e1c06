"""The template as these tests read it: as written, and after the SAM transform (as AWS sees it)."""

from __future__ import annotations

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.infra.test_template import PARAMETERS, TEMPLATE, Template, sam_transform


@pytest.fixture(scope="module")
def sam_template() -> Template:
    return yaml_parse(TEMPLATE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cfn(sam_template: Template) -> Template:
    return sam_transform(sam_template, PARAMETERS)
