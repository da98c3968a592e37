# The README's two commands: `make demo` and `make test`. Everything installs into .venv/.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# `make demo` installs only what the demo uses (the control plane and moto); `make test` and the
# other targets install everything (dev tools, CDK, frameworks): its stamp is the full one.
DEMO_STAMP := $(VENV)/.installed-demo

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv chromium hostnet test test-fast test-localstack lint docs demo synth bench bench-speed clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[control,local]'
	touch $(DEMO_STAMP)

lint: venv
	$(BIN)/ruff check spotline tests bench functions stacks scripts app.py conftest.py
	$(BIN)/mypy spotline
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python scripts/check_commits.py

# The docs site on http://127.0.0.1:8000, rebuilt on every edit (the full install has MkDocs).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The dashboard's browser tests drive Debian's chromium (Playwright, no download of its own):
# installed here when missing and apt-get can (as root or with sudo); else those tests skip.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 \
	  && $(SUDO) apt-get update -q && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	  --no-install-recommends chromium; } || echo "chromium is not installed: the browser tests will skip"

# The host-isolation tests (tests/infra/test_host_isolation_netns.py) run the instances' boot
# script in network namespaces: they need iptables, iproute2 and curl (installed here as for chromium).
hostnet:
	@command -v iptables >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 && command -v curl >/dev/null 2>&1 \
	  || { command -v apt-get >/dev/null 2>&1 && $(SUDO) apt-get update -q \
	  && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q --no-install-recommends \
	  iptables iproute2 curl; } || echo "iptables/iproute2/curl missing: the host-isolation tests will skip"

# After the suite, the LocalStack tier where a Python 3.13 can be had (scripts/localstack.sh); where
# none can, it says why and is skipped. In CI it may build one from Debian's sources (~18 min).
test: lint chromium hostnet
	bash scripts/pytest.sh
	SPOTLINE_BUILD_PYTHON=$${SPOTLINE_BUILD_PYTHON:-$${CI:+1}} bash scripts/localstack.sh --optional

# The LocalStack tier alone: LocalStack in its own Python 3.13 environment (.venv-localstack/),
# the workflows, rules, queue and checkpoints on it (tests/localstack/); fails without a 3.13.
test-localstack: venv
	bash scripts/localstack.sh

# The unit tier with a small Hypothesis budget (conftest.py): a minute, for the edit-test loop.
# `make test` runs every tier (unit, agent, integration, e2e, infra, sim, frameworks, bench) in full.
test-fast: venv
	bash scripts/pytest.sh tests/unit -m "not slow" --hypothesis-profile=fast -q

# A full install, where there is one, serves the demo too.
demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/spotline demo

synth: venv
	bash scripts/synth.sh

bench: venv
	$(BIN)/python -m bench

# The whole 82,247-job Philly trace through the five policies: a speed figure alone (about ten
# minutes on 2 cores), kept out of `make bench`; filed under bench/results/ on its own.
bench-speed: venv
	$(BIN)/python -m bench --speed

clean:
	rm -rf $(VENV) .venv-localstack build/site cdk.out .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
