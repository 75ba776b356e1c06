"""Check that `sam build` produced artifacts the Lambda runtime (python3.13, arm64) can load.

The build runs on whatever machine is at hand (here: x86_64, Python 3.11), so a wrong wheel or a
missing module would only show up as an import error in AWS. This script catches that first:

- the layer holds python/memagent with every module of layers/memagent, and no bytecode but
  CPython 3.13's;
- the layer holds exactly the distributions pinned in layers/requirements.txt, at those
  versions, none of the packages the runtime already provides (boto3 and its dependencies), none
  we keep out on purpose (the AWS X-Ray SDK), and every dependency they declare for CPython 3.13
  on Linux arm64 is in the layer or the runtime;
- every compiled extension is an ELF aarch64 object built for CPython 3.13 (or the stable ABI),
  pydantic_core's and jiter's among them; nothing x86_64, nothing for the local Python;
- every wheel's tags (`*.dist-info/WHEEL`) fit CPython 3.13 on manylinux aarch64, or are pure;
- every function in the built template runs python3.13 on arm64, uses the layer, and its
  artifact has the handler module with the handler function, and the files its environment
  names (SYSTEM_PROMPT_FILE's persona, TOOLS_FILE's tools) beside it.

Usage (with the project's virtualenv, which has PyYAML and packaging):

    sam build && python scripts/check_build.py [.aws-sam/build]

Exits 0 when everything holds; otherwise prints each problem and exits 1.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from email.parser import HeaderParser
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
SOURCE_PACKAGE = ROOT / "layers" / "memagent"
REQUIREMENTS = ROOT / "layers" / "requirements.txt"

RUNTIME = "python3.13"
ARCHITECTURE = "arm64"
PYTHON_TAG = "cp313"
# glibc of the python3.13 runtime (Amazon Linux 2023): manylinux wheels up to this version load
MAX_GLIBC = (2, 34)
# what the python3.13 runtime already provides: shipping them would shadow the runtime's SDK
RUNTIME_PROVIDED = frozenset(
    canonicalize_name(name)
    for name in ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil", "six")
)
# what must never ship, and why: each costs every cold start and none is used
NOT_SHIPPED: dict[str, str] = {
    canonicalize_name("aws-xray-sdk"): (
        "the X-Ray SDK (end of support 2027-02-25) comes with Powertools' `tracer` extra; "
        "keep Tracing: Active and add OpenTelemetry via the ADOT layer instead"
    ),
}
# the compiled modules our dependencies cannot work without
REQUIRED_EXTENSIONS = (
    "pydantic_core/_pydantic_core.cpython-313-aarch64-linux-gnu.so",
    "jiter/jiter.cpython-313-aarch64-linux-gnu.so",
)
# PEP 508 environment of the Lambda runtime, for dependency markers
TARGET_ENVIRONMENT = {
    "implementation_name": "cpython",
    "implementation_version": "3.13.0",
    "os_name": "posix",
    "platform_machine": "aarch64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.13.0",
    "python_version": "3.13",
    "sys_platform": "linux",
}

EM_AARCH64 = 183  # ELF e_machine
PYC_MAGIC_313 = b"\xf3\r\r\n"  # importlib.util.MAGIC_NUMBER of every CPython 3.13.x
PYC_UNCHECKED_HASH = (1).to_bytes(4, "little")  # PEP 552 flags: hash-based, source not checked
EXTENSION_SUFFIX = re.compile(r"\.(?:cpython-313-aarch64-linux-gnu|abi3)\.so$")
MANYLINUX = re.compile(r"^manylinux_(\d+)_(\d+)_aarch64$")
LEGACY_MANYLINUX = {"manylinux2014_aarch64": (2, 17)}


class BuildProblems(list[str]):
    def check(self, condition: bool, message: str) -> bool:
        if not condition:
            self.append(message)
        return condition


# --------------------------------------------------------------------------- layer


def check_memagent(layer: Path, problems: BuildProblems) -> None:
    shipped = layer / "memagent"
    problems.check((shipped / "__init__.py").is_file(), "layer lacks python/memagent/__init__.py")
    for module in sorted(SOURCE_PACKAGE.rglob("*.py")):
        if "__pycache__" in module.parts:
            continue
        relative = module.relative_to(SOURCE_PACKAGE)
        problems.check(
            (shipped / relative).is_file(),
            f"layer lacks python/memagent/{relative} (present in layers/memagent)",
        )
    # bytecode helps a cold start only if it is CPython 3.13's and never checked against the
    # sources' mtimes (the Makefile compiles so when a python3.13 is at hand); anything else
    # was left by the build machine's Python
    for pyc in sorted(layer.rglob("*.py[co]")):
        relative = pyc.relative_to(layer)
        if not pyc.name.endswith(".cpython-313.pyc"):
            problems.append(f"layer ships bytecode of the build machine's Python: {relative}")
            continue
        header = pyc.read_bytes()[:8]
        problems.check(header[:4] == PYC_MAGIC_313, f"{relative} is not CPython 3.13 bytecode")
        problems.check(
            header[4:8] == PYC_UNCHECKED_HASH,
            f"{relative} is not compiled with --invalidation-mode unchecked-hash",
        )


def _pins() -> dict[str, tuple[str, set[str]]]:
    """name -> (version, extras) from layers/requirements.txt."""
    pins: dict[str, tuple[str, set[str]]] = {}
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        specifiers = list(requirement.specifier)
        if len(specifiers) != 1 or specifiers[0].operator != "==":
            raise SystemExit(f"{REQUIREMENTS}: {line!r} is not an exact (==) pin")
        pins[canonicalize_name(requirement.name)] = (
            specifiers[0].version,
            set(requirement.extras),
        )
    return pins


def _distributions(layer: Path, problems: BuildProblems) -> dict[str, tuple[str, Path]]:
    """name -> (version, dist-info directory) of what the layer holds."""
    found: dict[str, tuple[str, Path]] = {}
    for dist_info in sorted(layer.glob("*.dist-info")):
        metadata = HeaderParser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8"))
        name = canonicalize_name(metadata["Name"])
        if name in found:
            problems.append(
                f"layer holds two copies of {name}: {found[name][1].name}, {dist_info.name}"
            )
        found[name] = (metadata["Version"], dist_info)
    return found


def _requires(dist_info: Path) -> list[Requirement]:
    metadata = HeaderParser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8"))
    return [Requirement(value) for value in metadata.get_all("Requires-Dist") or []]


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(
        requirement.marker.evaluate({**TARGET_ENVIRONMENT, "extra": extra})
        for extra in (extras or {""})
    )


def check_distributions(layer: Path, problems: BuildProblems) -> None:
    pins, shipped = _pins(), _distributions(layer, problems)
    for name, (version, _) in sorted(pins.items()):
        if problems.check(name in shipped, f"layer lacks {name}=={version} (pinned)"):
            problems.check(
                shipped[name][0] == version,
                f"layer has {name}=={shipped[name][0]}, requirements.txt pins {version}",
            )
    for name in sorted(shipped.keys() - pins.keys()):
        problems.append(f"layer ships {name}, which layers/requirements.txt does not pin")
    for name in sorted(shipped.keys() & RUNTIME_PROVIDED):
        problems.append(f"layer ships {name}: the python3.13 runtime provides it already")
    for name in sorted((shipped.keys() | pins.keys()) & NOT_SHIPPED.keys()):
        problems.append(f"layer ships {name}: {NOT_SHIPPED[name]}")

    # walk the dependency graph from the pinned roots, with the extras asked for
    queue = [(name, extras) for name, (_, extras) in pins.items()]
    seen: set[tuple[str, frozenset[str]]] = set()
    while queue:
        name, extras = queue.pop()
        if (name, frozenset(extras)) in seen or name not in shipped:
            continue
        seen.add((name, frozenset(extras)))
        version, dist_info = shipped[name]
        for requirement in _requires(dist_info):
            if not _applies(requirement, extras):
                continue
            dependency = canonicalize_name(requirement.name)
            if dependency in RUNTIME_PROVIDED:
                continue
            if dependency not in shipped:
                problems.append(f"{name} {version} needs {requirement}, missing from the layer")
                continue
            have = shipped[dependency][0]
            problems.check(
                requirement.specifier.contains(have, prereleases=True),
                f"{name} {version} needs {requirement}, the layer has {dependency} {have}",
            )
            queue.append((dependency, set(requirement.extras)))


def _tag_fits(tag: str) -> bool:
    """Could the runtime load a wheel with this expanded tag (cp313-cp313-manylinux2014_aarch64)?"""
    python, abi, platform = tag.split("-")
    if abi == "abi3":  # the stable ABI: built for CPython 3.x with x <= 13
        stable = re.fullmatch(r"cp3(\d+)", python)
        python_ok = stable is not None and int(stable[1]) <= 13
    else:
        python_ok = python in (PYTHON_TAG, "py3", "py313") and abi in (PYTHON_TAG, "none")
    return python_ok and _platform_fits(platform)


def _platform_fits(platform: str) -> bool:
    if platform == "any":
        return True
    if platform in LEGACY_MANYLINUX:
        return LEGACY_MANYLINUX[platform] <= MAX_GLIBC
    match = MANYLINUX.fullmatch(platform)
    return match is not None and (int(match[1]), int(match[2])) <= MAX_GLIBC


def check_wheel_tags(layer: Path, problems: BuildProblems) -> None:
    for wheel in sorted(layer.glob("*.dist-info/WHEEL")):
        header = HeaderParser().parsestr(wheel.read_text(encoding="utf-8"))
        tags = header.get_all("Tag") or []
        name = wheel.parent.name
        if not problems.check(bool(tags), f"{name}/WHEEL names no tag"):
            continue
        problems.check(
            any(_tag_fits(tag) for tag in tags),
            f"{name} was built for {', '.join(tags)}, not for CPython 3.13 on manylinux aarch64",
        )
        for tag in tags:
            platform = tag.rsplit("-", 1)[-1]
            problems.check(
                platform == "any" or platform.endswith("aarch64"),
                f"{name} carries a tag for another platform: {tag}",
            )


def _elf_machine(path: Path) -> int | None:
    with path.open("rb") as binary:
        header = binary.read(20)
    if len(header) < 20 or header[:4] != b"\x7fELF":
        return None
    return int.from_bytes(header[18:20], "little" if header[5] == 1 else "big")


def _binaries(layer: Path) -> Iterator[Path]:
    for path in sorted(layer.rglob("*")):
        if path.is_file() and (path.suffix == ".so" or ".so." in path.name):
            yield path


def check_binaries(layer: Path, problems: BuildProblems) -> None:
    for extension in REQUIRED_EXTENSIONS:
        problems.check((layer / extension).is_file(), f"layer lacks python/{extension}")
    for binary in _binaries(layer):
        relative = binary.relative_to(layer)
        machine = _elf_machine(binary)
        problems.check(
            machine == EM_AARCH64,
            f"{relative} is not an ELF aarch64 object (e_machine={machine})",
        )
        if binary.suffix == ".so" and (".cpython-" in binary.name or ".abi3" in binary.name):
            problems.check(
                bool(EXTENSION_SUFFIX.search(binary.name)),
                f"{relative} is an extension for another Python or platform",
            )
    for path in sorted(layer.rglob("*")):
        lowered = path.name.lower()
        if "x86_64" in lowered or "amd64" in lowered or "cpython-311" in lowered:
            problems.append(f"layer holds a build-machine artifact: {path.relative_to(layer)}")


# --------------------------------------------------------------------------- functions


def _layer_dirs(resources: dict) -> dict[str, Path]:
    return {
        logical_id: Path(resource["Properties"]["ContentUri"])
        for logical_id, resource in resources.items()
        if resource.get("Type") == "AWS::Serverless::LayerVersion"
    }


def _defines_function(module: Path, name: str) -> bool:
    tree = ast.parse(module.read_text(encoding="utf-8"), filename=str(module))
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in tree.body
    )


def check_functions(build_dir: Path, problems: BuildProblems) -> Path | None:
    """Check each function artifact; return the layer's python/ directory they share."""
    template = yaml.safe_load((build_dir / "template.yaml").read_text(encoding="utf-8"))
    defaults = template.get("Globals", {}).get("Function", {})
    resources = template.get("Resources", {})
    layers = _layer_dirs(resources)
    if not problems.check(len(layers) == 1, f"expected one layer, found {sorted(layers)}"):
        return None
    (layer_id, layer_dir), *_ = layers.items()
    functions = {
        logical_id: {**defaults, **resource.get("Properties", {})}
        for logical_id, resource in resources.items()
        if resource.get("Type") == "AWS::Serverless::Function"
    }
    problems.check(bool(functions), "the built template has no functions")
    for logical_id, properties in sorted(functions.items()):
        problems.check(
            properties.get("Runtime") == RUNTIME,
            f"{logical_id} runs {properties.get('Runtime')}, not {RUNTIME}",
        )
        problems.check(
            properties.get("Architectures") == [ARCHITECTURE],
            f"{logical_id} runs on {properties.get('Architectures')}, not [{ARCHITECTURE}]",
        )
        problems.check(
            {"Ref": layer_id} in (properties.get("Layers") or []),
            f"{logical_id} does not use the layer {layer_id}",
        )
        module_name, _, function_name = str(properties.get("Handler", "")).rpartition(".")
        module = build_dir / str(properties.get("CodeUri", "")) / f"{module_name}.py"
        if problems.check(module.is_file(), f"{logical_id}: artifact lacks {module.name}"):
            problems.check(
                _defines_function(module, function_name),
                f"{logical_id}: {module.name} defines no top-level {function_name}()",
            )
        for name in _shipped_files(properties, template.get("Parameters", {})):
            problems.check(
                (module.parent / name).is_file(),
                f"{logical_id}: artifact lacks {name}, which its environment names (a cold "
                "start would stop)",
            )
    return build_dir / layer_dir / "python"


def _shipped_files(properties: dict, parameters: dict) -> set[str]:
    """The files a function's environment names beside its handler (*_FILE: the persona, the
    tools), as the template's defaults and literal choices name them."""
    found: set[str] = set()

    def named(value: object) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict) and "Ref" in value:
            named(str(parameters.get(value["Ref"], {}).get("Default", "")))
        elif isinstance(value, dict) and "Fn::If" in value:
            for branch in value["Fn::If"][1:]:
                named(branch)

    variables = (properties.get("Environment") or {}).get("Variables") or {}
    for variable, value in variables.items():
        if variable.endswith("_FILE"):
            named(value)
    return {name for name in found if name}


# --------------------------------------------------------------------------- main


def check_build(build_dir: Path) -> list[str]:
    problems = BuildProblems()
    if not (build_dir / "template.yaml").is_file():
        return [f"{build_dir}/template.yaml not found: run `sam build` first"]
    layer = check_functions(build_dir, problems)
    if layer is None:
        return problems
    if not problems.check(layer.is_dir(), f"{layer} not found: the layer built nothing"):
        return problems
    check_memagent(layer, problems)
    check_distributions(layer, problems)
    check_wheel_tags(layer, problems)
    check_binaries(layer, problems)
    return problems


def _size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check sam build's artifacts for Lambda.")
    parser.add_argument("build_dir", nargs="?", type=Path, default=Path(".aws-sam/build"))
    args = parser.parse_args(argv)
    problems = check_build(args.build_dir)
    if problems:
        print(f"sam build artifacts in {args.build_dir} are NOT fit for {RUNTIME}/{ARCHITECTURE}:")
        for problem in problems:
            print(f"  - {problem}")
        return 1
    compiled = sum(1 for _ in args.build_dir.rglob("*.cpython-313.pyc"))
    print(
        f"ok: {args.build_dir} fits {RUNTIME}/{ARCHITECTURE} "
        f"({_size_mib(args.build_dir):.1f} MiB unzipped; Lambda allows 250 MiB per function; "
        + (
            f"{compiled} modules precompiled for 3.13)"
            if compiled
            else "no bytecode: each cold start compiles the layer)"
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
