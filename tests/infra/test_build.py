"""`sam build` on this machine produces artifacts the python3.13/arm64 runtime can load.

Runs the real SAM CLI (the one installed next to this interpreter) into a temporary build
directory, then scripts/check_build.py on the result, the same way a person or CI would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAM = Path(sys.executable).with_name("sam")
CHECK_BUILD = ROOT / "scripts" / "check_build.py"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("sam-build"),  # one build, shared by the module: one worker
    pytest.mark.skipif(
        not SAM.exists(),
        reason=f"the SAM CLI is not installed next to {sys.executable} (pip install aws-sam-cli)",
    ),
]


def _offline_env() -> dict[str, str]:
    """No AWS credentials, profile or region, no telemetry: a laptop that never saw AWS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        SAM_CLI_TELEMETRY="0",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def _run(args: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603 - fixed argv built from paths we control
        args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `sam build` of template.yaml into a temporary directory, shared by this module."""
    work = tmp_path_factory.mktemp("sam")
    target = work / "build"
    result = _run(
        [
            str(SAM),
            "build",
            "--template",
            "template.yaml",
            "--build-dir",
            str(target),
            "--cache-dir",
            str(work / "cache"),
        ],
        _offline_env(),
        timeout=300,
    )
    assert result.returncode == 0, f"sam build failed:\n{result.stdout}\n{result.stderr}"
    return target


def test_sam_build_artifacts_fit_python313_arm64(build_dir: Path) -> None:
    # given a fresh `sam build` of the template
    # when the build checker inspects it
    result = _run([sys.executable, str(CHECK_BUILD), str(build_dir)], os.environ.copy(), 60)
    # then every function, the layer's memagent package and its wheels fit the Lambda runtime
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok:")


def test_check_build_rejects_an_x86_64_extension(build_dir: Path, tmp_path: Path) -> None:
    # given a build whose layer picked up an extension compiled for the build machine
    tampered = tmp_path / "build"
    shutil.copytree(build_dir, tampered)
    stray = tampered / "AgentLayer" / "python" / "jiter" / "jiter.cpython-311-x86_64-linux-gnu.so"
    elf_x86_64 = b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little") + bytes(44)
    stray.write_bytes(elf_x86_64)
    # when the build checker inspects it
    result = _run([sys.executable, str(CHECK_BUILD), str(tampered)], os.environ.copy(), 60)
    # then it fails and names the offending file
    assert result.returncode == 1
    assert "jiter.cpython-311-x86_64-linux-gnu.so is not an ELF aarch64 object" in result.stdout


def test_check_build_rejects_a_layer_without_memagent(build_dir: Path, tmp_path: Path) -> None:
    # given a build whose layer lost the domain package
    tampered = tmp_path / "build"
    shutil.copytree(build_dir, tampered)
    shutil.rmtree(tampered / "AgentLayer" / "python" / "memagent")
    # when the build checker inspects it
    result = _run([sys.executable, str(CHECK_BUILD), str(tampered)], os.environ.copy(), 60)
    # then it fails with a message a person can act on
    assert result.returncode == 1
    assert "layer lacks python/memagent/__init__.py" in result.stdout


def test_sam_validate_lint_works_offline() -> None:
    # given no AWS credentials, profile or region
    # when the template is validated with the linter, as `sam validate --lint` does
    result = _run(
        [str(SAM), "validate", "--lint", "--template", "template.yaml"],
        _offline_env(),
        timeout=120,
    )
    # then it passes without reaching AWS
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is a valid SAM Template" in result.stdout + result.stderr
