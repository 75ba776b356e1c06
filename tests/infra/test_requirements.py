"""What the layer ships (layers/requirements.txt, installed with --no-deps) and what
scripts/check_build.py refuses. Fast: no `sam build`, a layer directory made of dist-infos."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _check_build():
    path = ROOT / "scripts" / "check_build.py"
    spec = importlib.util.spec_from_file_location("check_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _layer(path: Path, distributions: dict[str, str]) -> Path:
    for name, version in distributions.items():
        info = path / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


def test_the_pinned_closure_has_no_xray_sdk_and_no_tracer_extra():
    check_build = _check_build()
    pins = check_build._pins()
    # the layer is installed from these pins alone (--no-deps): what is not pinned never ships
    assert "aws-xray-sdk" not in pins and "wrapt" not in pins
    assert "tracer" not in pins["aws-lambda-powertools"][1]
    assert "aws-xray-sdk" in check_build.NOT_SHIPPED


def test_check_build_refuses_a_layer_that_ships_the_xray_sdk(tmp_path):
    check_build = _check_build()
    pinned = {name: version for name, (version, _) in check_build._pins().items()}
    layer = _layer(tmp_path, {**pinned, "aws-xray-sdk": "2.15.0"})
    problems = check_build.BuildProblems()
    check_build.check_distributions(layer, problems)
    assert any("aws-xray-sdk" in problem and "X-Ray SDK" in problem for problem in problems)


def test_check_build_accepts_the_pinned_closure(tmp_path):
    check_build = _check_build()
    pinned = {name: version for name, (version, _) in check_build._pins().items()}
    problems = check_build.BuildProblems()
    check_build.check_distributions(_layer(tmp_path, pinned), problems)
    assert list(problems) == []
