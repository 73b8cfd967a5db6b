# Lethe: every command a developer, CI or an operator needs. `make help` lists them.
# On a fresh machine `make test` and `make demo` install everything they need, pinned.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
SAM_VENV := .venv-sam
CHECKOV_VENV := .venv-checkov
LAMBDA_VENV := .venv-lambda
# The Lambda runtime's Python minor version (template.yaml Globals Runtime: python3.13). It builds
# the layers (`sam build` without a container needs that interpreter) and runs the Lambda test
# tier. LAMBDA_PYTHON is the first of python3.13 on PATH and pyenv's 3.13.* that really is 3.13
# (a pyenv shim whose version is not selected fails the check); override it to use another.
LAMBDA_PYTHON_VERSION := 3.13
# The machine name of template.yaml's Architectures: [arm64].
LAMBDA_MACHINE := aarch64
LAMBDA_PYTHON ?= $(shell for p in python$(LAMBDA_PYTHON_VERSION) $$HOME/.pyenv/versions/$(LAMBDA_PYTHON_VERSION).*/bin/python$(LAMBDA_PYTHON_VERSION); do \
  "$$p" -c 'import sys; v = "%d.%d" % sys.version_info[:2]; v == "$(LAMBDA_PYTHON_VERSION)" or sys.exit(1); print(sys.executable)' 2>/dev/null && break; \
  done; true)
BUILD := .build
PIP_VERSION := 25.3

export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= us-east-1
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export SPARK_LOCAL_IP := 127.0.0.1
export POWERTOOLS_TRACE_DISABLED := true
export PYTHONDONTWRITEBYTECODE := 1

PYTEST := $(BIN)/pytest
ASL_FILES := $(wildcard statemachines/*.asl.json)
FUNCTION_DIRS := $(wildcard functions/*)

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}'

# ------------------------------------------------------------------ environments
.PHONY: venv tools system-deps browser-deps
venv: $(VENV)/.installed ## Create .venv with the pinned dev/test dependencies and the lethe CLI

$(VENV)/.installed: requirements/dev.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip==$(PIP_VERSION)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements/dev.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

# SAM CLI and checkov pin boto3/pydantic versions that clash with moto: each gets its own venv.
$(SAM_VENV)/.installed: requirements/sam.lock
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check --upgrade pip==$(PIP_VERSION)
	$(SAM_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/sam.lock
	touch $@

$(CHECKOV_VENV)/.installed: requirements/checkov.lock
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check --upgrade pip==$(PIP_VERSION)
	$(CHECKOV_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/checkov.lock
	touch $@

tools: $(SAM_VENV)/.installed $(CHECKOV_VENV)/.installed ## Create the SAM CLI and checkov venvs

.PHONY: lambda-python
lambda-python: ## Find the Lambda runtime's Python (LAMBDA_PYTHON_VERSION); fail with a message when missing
	@if [ -z "$(LAMBDA_PYTHON)" ]; then \
	  echo "Python $(LAMBDA_PYTHON_VERSION) not found: the Lambda runtime is python$(LAMBDA_PYTHON_VERSION) (template.yaml)," \
	    "and make lambda-tests and make sam-build need that interpreter. Looked for python$(LAMBDA_PYTHON_VERSION)" \
	    "on PATH and in ~/.pyenv/versions/$(LAMBDA_PYTHON_VERSION).*; install it or set LAMBDA_PYTHON=/path/to/python$(LAMBDA_PYTHON_VERSION)." >&2; \
	  exit 1; \
	fi
	@echo "Lambda runtime Python: $(LAMBDA_PYTHON)"

# The Lambda test tier's venv, on the runtime's Python minor version (requirements/lambda.in).
$(LAMBDA_VENV)/.installed: requirements/lambda.lock | lambda-python
	$(LAMBDA_PYTHON) -m venv $(LAMBDA_VENV)
	$(LAMBDA_VENV)/bin/pip install --quiet --disable-pip-version-check --upgrade pip==$(PIP_VERSION)
	$(LAMBDA_VENV)/bin/pip install --quiet --disable-pip-version-check -r requirements/lambda.lock
	touch $@

browser-deps: ## Debian's Chromium for the approval page's browser tests (Playwright never downloads one)
	@if ! command -v chromium >/dev/null; then \
	  echo "chromium not found: installing Debian's chromium"; \
	  apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	fi

system-deps: ## Check for Java 17 (Spark); install it with apt when missing
	@if ! java -version 2>&1 | grep -q 'version "17'; then \
	  echo "Java 17 not found: installing openjdk-17-jre-headless"; \
	  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null; \
	fi

# ------------------------------------------------------------------ quality gates
.PHONY: lint ruff mypy statelint sam-validate cfn-lint checkov sam-build
lint: ruff mypy statelint sam-validate cfn-lint checkov sam-build ## Every static gate

ruff: venv ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

mypy: venv ## mypy: strict on lethe_shared, the Spark jobs and the test fakes; the CLI, functions, unit tests, the erasure benchmark and the report
	$(BIN)/mypy layers/shared/lethe_shared spark_jobs src/lethe
	MYPYPATH=layers/shared:spark_jobs:src $(BIN)/mypy --strict tests/fakes.py
	MYPYPATH=layers/shared:spark_jobs:src $(BIN)/mypy tests/unit
	MYPYPATH=layers/shared:spark_jobs:src:bench $(BIN)/mypy bench/erasure_bench.py bench/generate_lake.py bench/locality_bench.py bench/report.py bench/ingest_profile.py bench/cost_model.py bench/segment_bench.py bench/segment_store_bench.py bench/lookup_bench.py
	@for dir in $(FUNCTION_DIRS); do \
	  echo "mypy $$dir"; MYPYPATH=layers/shared $(BIN)/mypy $$dir/app.py || exit 1; \
	done

statelint: venv ## statelint on every state machine definition
	@if [ -z "$(ASL_FILES)" ]; then echo "no ASL files"; exit 0; fi
	$(BIN)/statelint --ignore=FLOAT $(ASL_FILES)

sam-validate: $(SAM_VENV)/.installed ## sam validate --lint (cfn-lint rules SAM ships)
	$(SAM_VENV)/bin/sam validate --lint --template template.yaml

cfn-lint: venv ## cfn-lint on the SAM-translated template (.cfnlintrc lists the justified ignores)
	$(BIN)/python -m lethe.localcloud.template $(BUILD)/template.cfn.json
	$(BIN)/cfn-lint $(BUILD)/template.cfn.json

checkov: $(CHECKOV_VENV)/.installed ## checkov on template.yaml (skips are justified inline)
	$(CHECKOV_VENV)/bin/checkov -f template.yaml --framework cloudformation --skip-download --quiet --compact

# Without a container, sam build installs the layers' packages with the runtime's own Python
# (python3.13 on PATH) and asks pip for cp313 manylinux wheels of the layer's BuildArchitecture.
sam-build: $(SAM_VENV)/.installed lambda-python ## sam build (no container), with the Lambda runtime's Python
	PATH="$(dir $(LAMBDA_PYTHON)):$$PATH" $(SAM_VENV)/bin/sam build --template template.yaml --build-dir .aws-sam/build --cached --cache-dir .aws-sam/cache
	PYTHONPATH=src $(LAMBDA_PYTHON) -m lethe.lambda_build .aws-sam/build --python $(LAMBDA_PYTHON_VERSION) --arch $(LAMBDA_MACHINE)
	PYTHONPATH=src $(LAMBDA_PYTHON) -m lethe.build_stamp .aws-sam/build

# ------------------------------------------------------------------ tests
.PHONY: test unit integration lambda-tests spark sfn e2e
test: lint unit integration lambda-tests spark sfn e2e ## Every gate and every test tier (what CI runs)

unit: venv ## Unit tests (no network)
	$(PYTEST) tests/unit -m unit -q

# The integration tier is CPU-bound Python in one process: two workers (pytest-xdist), each test
# file on one worker (its module fixtures, such as a moto server, are set up once).
INTEGRATION_WORKERS ?= 2
integration: venv $(SAM_VENV)/.installed browser-deps ## Handlers, adapters and local cloud parts against moto (and SAM CLI's env resolution)
	$(PYTEST) tests/integration -m integration -q -n $(INTEGRATION_WORKERS) --dist loadfile

# The test modules marked lambda_runtime (handlers with moto, lethe_shared), run again under the
# Lambda runtime's Python minor version with the layers' pins. They are found by their marker:
# the other modules of tests/ import pyspark or the local cloud, which that venv does not have.
LAMBDA_TEST_FILES = $(shell grep -l 'pytest.mark.lambda_runtime' tests/unit/test_*.py tests/integration/test_*.py)
lambda-tests: $(LAMBDA_VENV)/.installed ## Handler and lethe_shared tests on the Lambda runtime's Python (.venv-lambda)
	$(LAMBDA_VENV)/bin/python -c 'import sys; v = "%d.%d" % sys.version_info[:2]; v == "$(LAMBDA_PYTHON_VERSION)" or sys.exit(f"$(LAMBDA_VENV) runs Python {v}, not $(LAMBDA_PYTHON_VERSION): rm -r $(LAMBDA_VENV)")'
	$(LAMBDA_VENV)/bin/pytest -m lambda_runtime -q -p no:cacheprovider $(LAMBDA_TEST_FILES)

spark: venv system-deps ## PySpark jobs on a local[2] session
	$(PYTEST) tests/spark -m spark -q

sfn: venv system-deps ## State machines executed by moto's interpreter, from the deployed files
	$(PYTEST) tests/sfn -m sfn -q

e2e: venv system-deps ## End to end on the local cloud, started through the CLI
	$(PYTEST) tests/e2e -m e2e -q

# ------------------------------------------------------------------ benchmarks (on demand, never part of `make test`)
.PHONY: bench
# ingestion against plain Spark: `make bench` runs the quick size (128 MiB; 20 x 10 MiB), whose
# JSON replaces the published one; the issue's size (1 GiB; 100 x 10 MiB) is run one case per
# process and merged with --merge (bench/README.md), about 5-10 minutes a case at low load
INGEST_SPARK_BENCH_ARGS ?= --quick --subjects 1000
BENCH_ARGS ?=
INGEST_BENCH_ARGS ?=
ERASURE_BENCH_ARGS ?=
# the K = 10 erasure locality on a lake of 20,000 objects (generated, ~2 GiB in a temporary
# directory) beside the 500-object lake; LOCALITY_BENCH_ARGS="--lake DIR" keeps the lakes for reuse
LOCALITY_BENCH_ARGS ?=
# K = 10 lookups in the segment index of a simulated lake of 100,000 objects (moto in-process);
# LOOKUP_BENCH_ARGS="--objects 20000" for a quicker run
LOOKUP_BENCH_ARGS ?=
# DynamoDB writes per ingested row on the segment index: the real ingest and compaction jobs on
# the benchmark lake (~6 min); INDEX_WRITES_BENCH_ARGS= for its three default shapes (~20 min)
INDEX_WRITES_BENCH_ARGS ?= --shapes 200x2000
bench: venv system-deps lambda-python ## Subject index, erasure, ingestion and Lambda footprint benchmarks; results in docs/BENCHMARKS.md (BENCH_ARGS="--spark ...", ERASURE_BENCH_ARGS="--full ...", LOCALITY_BENCH_ARGS="--lake DIR", LOOKUP_BENCH_ARGS="--objects N", INGEST_BENCH_ARGS="--full ...", INGEST_SPARK_BENCH_ARGS="" for the full size, LAMBDA_BENCH_ARGS="--rounds 30")
	$(BIN)/python bench/report.py --record-machine
	$(BIN)/python bench/index_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/segment_bench.py
	$(BIN)/python bench/erasure_bench.py $(ERASURE_BENCH_ARGS)
	$(BIN)/python bench/locality_bench.py $(LOCALITY_BENCH_ARGS)
	$(BIN)/python bench/lookup_bench.py $(LOOKUP_BENCH_ARGS)
	$(BIN)/python bench/segment_store_bench.py
	$(BIN)/python bench/index_writes_bench.py $(INDEX_WRITES_BENCH_ARGS)
	$(BIN)/python bench/ingest_bench.py $(INGEST_BENCH_ARGS)
	$(BIN)/python bench/ingest_vs_spark.py $(INGEST_SPARK_BENCH_ARGS)
	$(MAKE) sam-build
	$(BIN)/python bench/lambda_footprint.py --python $(LAMBDA_PYTHON) $(LAMBDA_BENCH_ARGS)
	$(BIN)/python bench/report.py --finish-machine

# ------------------------------------------------------------------ load (on demand, never part of `make test`)
.PHONY: soak
SOAK_ARGS ?=
soak: venv system-deps ## Load on the local cloud: 1,000 uploads in a burst, 50 erasure requests at once (SOAK_ARGS=--quick for a development size); figures in .lethe/soak.json
	$(PYTEST) tests/soak -m soak -q --timeout 3600 --soak-report .lethe/soak.json $(SOAK_ARGS)

# ------------------------------------------------------------------ running it
.PHONY: demo local-up local-down build deploy deploy-check deploy-artifacts diagram clean
demo: venv system-deps ## The end-to-end scenario on the local cloud
	$(BIN)/lethe demo

local-up: venv system-deps ## Start the local cloud in the background (state in .lethe/local.json)
	$(BIN)/lethe local up --detach --state-file .lethe/local.json

local-down: venv ## Stop the local cloud
	$(BIN)/lethe local down --state-file .lethe/local.json

diagram: venv ## Regenerate the architecture diagram in docs/ARCHITECTURE.md from template.yaml
	$(BIN)/python -m lethe.diagram --write

build: sam-build ## sam build

SPARK_ARTIFACTS := $(BUILD)/spark-artifacts
.PHONY: artifacts
artifacts: venv ## Build the Spark artifacts and the EMR Serverless Python environment into .build/spark-artifacts
	$(BIN)/lethe artifacts build --out $(SPARK_ARTIFACTS)

# `lethe deploy`: make build, sam deploy (everything in DEPLOY_ARGS goes to it as is) and the
# Spark artifacts' upload, as one command with one exit status (docs/DEPLOY.md).
DEPLOY_ARGS ?=
AWS_TARGET = $(if $(REGION),--region $(REGION)) $(if $(PROFILE),--profile $(PROFILE))
deploy: venv artifacts ## Deploy: make build, sam deploy (DEPLOY_ARGS="--guided", "--config-env prod") and the Spark artifacts upload, one command (REGION=, PROFILE=)
	$(BIN)/lethe deploy $(AWS_TARGET) --artifacts $(SPARK_ARTIFACTS) -- $(DEPLOY_ARGS)

deploy-check: venv ## Dry run of the first deploy: every prerequisite and quota of docs/DEPLOY.md's checklist for an account and region, OK / MISSING / CONFLICT / UNKNOWN (REGION=, PROFILE=, DEPLOY_ARGS=)
	$(BIN)/lethe deploy --dry-run $(AWS_TARGET) --artifacts $(SPARK_ARTIFACTS) -- $(DEPLOY_ARGS)

deploy-artifacts: venv ## Build the Spark artifacts, then upload them to a deployed stack's artifacts bucket (BUCKET=...)
	@test -n "$(BUCKET)" || (echo "usage: make deploy-artifacts BUCKET=<ArtifactsBucketName output>" && exit 2)
	$(MAKE) --no-print-directory artifacts
	$(BIN)/lethe artifacts upload --from $(SPARK_ARTIFACTS) --bucket $(BUCKET)

clean: ## Remove build output and caches (not the venvs)
	rm -rf $(BUILD) .aws-sam .pytest_cache .mypy_cache .ruff_cache spark-warehouse
