# The few commands a person needs. Everything runs from a project-local virtualenv (.venv) that
# the first command creates, so a fresh clone needs only python3 (3.11+) and make.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help install test test-slow test-all mutation lint format validate scan build events docs bench demo chat invoke console smoke clean

help:
	@echo "make test      the test suite, in parallel, without the slow tier (creates .venv)"
	@echo "make test-slow the slow tier: sam build, the demo, the bench smoke, the 20 x 60 stack run,"
	@echo "               the console in Chromium, the admin API fuzzed (Schemathesis)"
	@echo "make test-all  both (CI runs both)"
	@echo "make mutation  mutmut on the domain modules (MODULE=memory.facts: one), a score per module"
	@echo "make lint      ruff lint and format check, import-linter's contracts, mypy"
	@echo "make validate  sam validate --lint (offline)"
	@echo "make scan      checkov on template.yaml (its own virtualenv, .venv-scan)"
	@echo "make build     sam build for python3.13/arm64, then check the artifacts"
	@echo "make events    re-sign events/webhook-*.json with a fresh timestamp"
	@echo "make docs      rewrite docs/deploy.md's parameters table from template.yaml's Descriptions"
	@echo "make demo      the whole pipeline on this machine, a scripted conversation (no AWS, no key);"
	@echo "               make demo PROVIDER=meta runs it through Meta's Cloud API payloads;"
	@echo "               make demo MODEL_PROVIDER=bedrock with ModelProvider=bedrock (still offline)"
	@echo "make chat      the same local stack, interactive (/human, /say TEXT, /back: the operator, /prompt)"
	@echo "make invoke    FUNCTION=consumer EVENT=events/consumer-sqs-batch.json: one function, one event,"
	@echo "               on the local stack (no Docker): its logs and response, as sam local invoke prints them"
	@echo "make console   the operator's console: the local stack's, signed in as a seeded operator;"
	@echo "               STACK=name: a deployed stack's admin API on http://127.0.0.1:8089 (your AWS credentials)"
	@echo "make smoke     STACK=name: check a deployed stack from outside (your AWS credentials): outputs,"
	@echo "               secrets and who may read them, the webhook refusing an unsigned POST, a test"
	@echo "               person answered into the void, alarms reaching a subscriber; without STACK,"
	@echo "               a local stack (PROVIDER=meta: Meta's)"
	@echo "make bench     benchmarks -> docs/benchmarks.md"

install: $(STAMP)

# What ships to Lambda is pinned in layers/requirements.txt; install it first so the tests run
# against those exact versions, then the project (editable) with its dev tools.
$(STAMP): pyproject.toml layers/requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r layers/requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# pytest-xdist workers (below); `--dist loadgroup` (pyproject.toml's addopts) keeps tests
# that share a module-scoped fixture (a local stack, a sam build) on one worker. The slow tier
# (end-to-end runs in subprocesses: sam build, the demo, the bench smoke, the full 20 x 60 stack
# run) is its own target; CI runs both (.ci/run).
# Run one test the plain way: .venv/bin/python -m pytest tests/path.py::name
# One worker more than the cores: a worker's process also waits (on its stand-ins' sockets and
# timers), and with one a core 1.68 of 2 cores were busy. On 2 cores, from a quiet machine:
# -n 2 197.5 s, -n 3 173.2 s, -n 4 206.2 s (the fourth's start-up and contention cost more).
PYTEST_PARALLEL := -n $(shell $(PYTHON) -c 'import os; print((os.cpu_count() or 1) + 1)')
# Python's bytecode cache on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every
# worker compiles the project and rewrites pytest's plugins from source at each start (12 s of
# CPU per worker to collect, against 4 s), and so does every process a test starts.
unexport PYTHONDONTWRITEBYTECODE

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_PARALLEL) -m "not slow"

# the slow tier's tests run subprocesses of their own (sam build, the demo, a whole stack): one
# worker per core
test-slow: $(STAMP)
	$(PY) -m pytest -n auto -m slow

test-all: $(STAMP)
	$(PY) -m pytest $(PYTEST_PARALLEL)

# Mutation testing (mutmut, configured in pyproject.toml): not part of make test. One child
# process by default: the machine is shared; MUTATION_CHILDREN=2 on a free one.
MUTATION_CHILDREN ?= 1

mutation: $(STAMP)
	$(PY) scripts/mutation.py --max-children $(MUTATION_CHILDREN) $(MODULE)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

validate: $(STAMP)
	$(VENV)/bin/sam validate --lint

# checkov, in a virtualenv of its own: it pins its own versions of boto3 and friends, which must
# not move the ones the tests run against (layers/requirements.txt). Every finding is fixed or
# skipped inline in template.yaml (Metadata: checkov: skip:) with the reason.
SCAN_VENV := .venv-scan
CHECKOV_VERSION := 3.3.30
SCAN_STAMP := $(SCAN_VENV)/.checkov-$(CHECKOV_VERSION)

$(SCAN_STAMP):
	test -x $(SCAN_VENV)/bin/python || $(PYTHON) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install --quiet --disable-pip-version-check checkov==$(CHECKOV_VERSION)
	touch $(SCAN_STAMP)

# --skip-download: checkov's policies are in the package; without it checkov asks Prisma Cloud
# for guideline links first (a traceback where there is no network)
# checkov decides a resource's Condition from the parameters' defaults: the stack is scanned as
# it deploys by default, then with its optional parts on (follow-ups, the example tool)
SCAN_SHAPE := .aws-sam/template-all-on.yaml

scan: $(SCAN_STAMP)
	$(SCAN_VENV)/bin/checkov --file template.yaml --framework cloudformation --quiet --compact --skip-download
	mkdir -p .aws-sam
	$(PYTHON) scripts/template_shape.py FollowUps=true ExampleBookingTool=true OperatorConsole=true > $(SCAN_SHAPE)
	$(SCAN_VENV)/bin/checkov --file $(SCAN_SHAPE) --framework cloudformation --quiet --compact --skip-download

build: $(STAMP)
	$(VENV)/bin/sam build
	$(PY) scripts/check_build.py .aws-sam/build

events: $(STAMP)
	$(PY) scripts/sign_events.py

# docs/deploy.md's parameters table, from template.yaml (tests/infra/test_configuration.py fails
# when it is stale)
docs: $(STAMP)
	$(PY) scripts/docs.py

demo: $(STAMP)
	$(PY) -m devstack.demo $(if $(PROVIDER),--provider $(PROVIDER)) $(if $(MODEL_PROVIDER),--model-provider $(MODEL_PROVIDER))

chat: $(STAMP)
	$(PY) -m devstack.chat

invoke: $(STAMP)
	$(PY) scripts/invoke.py $(or $(FUNCTION),$(error FUNCTION=consumer, webhook, compactor ...)) $(or $(EVENT),$(error EVENT=events/....json))

# the admin API of a deployed stack (STACK=name, your AWS credentials), else of a local stack
console: $(STAMP)
	$(PY) -m console.server $(if $(STACK),--stack $(STACK))

# a deployed stack checked from outside (STACK=name, your AWS credentials), else a local stack
smoke: $(STAMP)
	$(PY) scripts/smoke.py $(if $(STACK),--stack $(STACK),--local $(if $(PROVIDER),--provider $(PROVIDER)))

bench: $(STAMP)
	$(PY) bench/run.py --out docs/benchmarks.md

clean:
	rm -rf .aws-sam .pytest_cache .ruff_cache .hypothesis .import_linter_cache .mypy_cache
