# The README's two commands: `make demo` and `make test`. Everything installs into .venv/.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: venv test lint demo synth bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

lint: venv
	$(BIN)/ruff check spotline tests bench functions stacks scripts app.py
	$(BIN)/mypy spotline
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

test: lint
	bash scripts/pytest.sh

demo: venv
	$(BIN)/spotline demo

synth: venv
	bash scripts/synth.sh

bench: venv
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build/site cdk.out .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
