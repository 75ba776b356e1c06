"""Cold-start cost of each function: loading functions/<name>/app.py as Lambda's init does
(import by file path, run its module-level code), next to `import boto3` alone (the floor of any
Python Lambda that talks to AWS) and `import openai` (the floor of one that calls the model).

Each sample is a fresh interpreter with Lambda's environment (LAMBDA_ENV: the runtime's variables,
dummy credentials, no instance metadata), with what this virtualenv has but Lambda does not
hidden (NOT_IN_LAMBDA); rows are sampled in turns, so a change in load hits every row alike. Also
reported: whether `openai` was imported (the webhook's cold path must not) and which third-party
packages loaded. Times are reported, never asserted (figure 1).
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS = ("webhook", "consumer", "compactor")
TEST_SECRET = "whsec_" + base64.b64encode(b"memagent-test-only-secret-do-not-use").decode()
# Importable in this virtualenv (the SAM CLI and moto bring them) but neither in the python3.13
# runtime nor in layers/requirements.txt. Left visible, they would skew both rows: botocore uses
# awscrt and pyOpenSSL when present, and X-Ray patches the database and HTTP clients it finds.
NOT_IN_LAMBDA = ("awscrt", "OpenSSL", "cryptography", "requests", "httpx", "aiobotocore")
NOT_IN_LAMBDA += ("pynamodb", "mysql", "pymysql", "pymongo", "psycopg", "psycopg2", "pg8000")
NOT_IN_LAMBDA += ("sqlalchemy",)

CHILD = """
import importlib.abc, importlib.util, json, sys, time

class _NotInLambda(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _NotInLambda())
started = time.perf_counter()
{body}
elapsed = time.perf_counter() - started
loaded = {{m.split(".")[0] for m in sys.modules}} - set(sys.stdlib_module_names)
print(json.dumps({{
    "ms": elapsed * 1000,
    "openai": "openai" in sys.modules,
    "packages": sorted(m for m in loaded if not m.startswith("_")),
}}))
"""

IMPORT_BOTO3 = "import boto3"
IMPORT_BOTO3_CLIENT = "import boto3; boto3.client('sqs')"
IMPORT_OPENAI = "import openai"
# what the first model call loads besides: the Responses API and its types
IMPORT_OPENAI_RESPONSES = "import openai.resources.responses"
# The consumer's third-party floor: what it loads and creates at init, less its own code (memagent):
# the Responses API, boto3 with the table's resource and a queue client, Powertools' logger,
# metrics and batch utility. The consumer's row over this one is the price of memagent itself.
IMPORT_CONSUMER_FLOOR = """
import openai.resources.responses, boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.utilities.batch import process_partial_response
boto3.resource("dynamodb"); boto3.client("sqs")
"""
LOAD_FUNCTION = """
sys.path.insert(0, {task_root!r})
spec = importlib.util.spec_from_file_location("app", {path!r})
module = importlib.util.module_from_spec(spec)
sys.modules["app"] = module
spec.loader.exec_module(module)
assert callable(module.handler)
"""


@dataclass
class Result:
    samples: list[float]
    openai: bool
    packages: list[str]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p90(self) -> float:
        if len(self.samples) < 2:
            return self.samples[0]
        return statistics.quantiles(self.samples, n=10, method="inclusive")[-1]


# The environment every function gets here, as Lambda would set it: the runtime's variables,
# dummy credentials and region (Lambda puts the role's there), Powertools' and our settings.
LAMBDA_ENV = {
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
    "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "ASIABENCHMARKONLY000",
    "AWS_SECRET_ACCESS_KEY": "bench-only-not-a-secret",
    "AWS_SESSION_TOKEN": "bench-only",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000",
    "AWS_XRAY_CONTEXT_MISSING": "IGNORE_ERROR",
    "POWERTOOLS_SERVICE_NAME": "whasp-agent",
    "POWERTOOLS_METRICS_NAMESPACE": "WhaspAgent",
    "POWERTOOLS_LOG_LEVEL": "INFO",
    "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/whasp-agent-EventQueue.fifo",
    "AGENT_ID": "coach",
    "WEBHOOK_SECRET": TEST_SECRET,
    "MEMAGENT_LOCAL_STACK": "1",  # the published test secret is accepted in local runs only
    "PERSON_KEY": "memagent-local-person-key-published-never-use-in-aws",
    # the consumer's and compactor's settings (keys as plain local values: no secret is read at
    # init either way)
    "TABLE_NAME": "whasp-agent-MemoryTable-bench",
    "WHASP_API_URL": "https://api.whasp.example",
    "WHASP_API_KEY": "whasp-bench-key",
    "OPENAI_API_KEY": "sk-bench",
    "OPENAI_MODEL": "gpt-6-luna",
    "PARKING_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/dlq.fifo",
}


def lambda_like_env(home: str, function: str = "webhook") -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "POWERTOOLS_", "PYTHON", "LAMBDA_", "_X_AMZN"))
    }
    env.update(LAMBDA_ENV)
    env.update(
        HOME=home,
        LAMBDA_TASK_ROOT=str(ROOT / "functions" / function),
        AWS_LAMBDA_FUNCTION_NAME=f"whasp-agent-{function.title()}Function-bench",
    )
    return env


def sample(body: str, env: dict[str, str]) -> dict:
    code = CHILD.format(hidden=frozenset(NOT_IN_LAMBDA), body=body)
    completed = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if completed.returncode != 0:
        raise SystemExit(f"the child interpreter failed:\n{completed.stderr}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def measure(rows: dict[str, tuple[str, dict[str, str]]], runs: int) -> dict[str, Result]:
    """Sample each row `runs` times (key -> (code, environment)), in turns."""
    for body, env in rows.values():
        sample(body, env)  # once untimed: fills the OS file cache and the bytecode cache
    samples: dict[str, list[float]] = {key: [] for key in rows}
    last: dict[str, dict] = {}
    for _ in range(runs):
        for key, (body, env) in rows.items():
            last[key] = sample(body, env)
            samples[key].append(last[key]["ms"])
    return {key: Result(samples[key], last[key]["openai"], last[key]["packages"]) for key in rows}


def compare(runs: int) -> dict[str, Result]:
    """The baselines (`import boto3`, `import boto3` and one client, `import openai`) and each
    function's module load, `runs` fresh interpreters each. Keys: boto3, boto3_client, openai,
    openai_responses, consumer_floor, webhook, consumer, compactor."""
    with tempfile.TemporaryDirectory() as home:
        env = lambda_like_env(home)
        rows = {
            "boto3": (IMPORT_BOTO3, env),
            "boto3_client": (IMPORT_BOTO3_CLIENT, env),
            "openai": (IMPORT_OPENAI, env),
            "openai_responses": (IMPORT_OPENAI_RESPONSES, env),
            "consumer_floor": (IMPORT_CONSUMER_FLOOR, env),
        }
        for function in FUNCTIONS:
            app = ROOT / "functions" / function / "app.py"
            body = LOAD_FUNCTION.format(task_root=str(app.parent), path=str(app))
            rows[function] = (body, lambda_like_env(home, function))
        return measure(rows, runs)
