VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: test lint demo bench venv clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,plot,lint]'
	touch $@

venv: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest

# ruff and mypy --strict over the package (the style and typing rules of STYLE.md).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/mypy

# The demo needs ctxledger and matplotlib only: a fresh checkout installs just those (the test
# and lint tools come with `make test` / `make lint`); a full venv is used as it is.
$(VENV)/.demo-installed: pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet -e '.[plot]'
	touch $@

demo: $(if $(wildcard $(VENV)/.installed),$(VENV)/.installed,$(VENV)/.demo-installed)
	$(VENV)/bin/ctxledger demo

# Not part of `make test`: the peers need langgraph and eventsourcing (the `bench` extra), and
# the full persistence run takes tens of minutes. Results land in bench/results/.
bench: $(VENV)/.installed
	$(PIP) install --quiet -e '.[test,plot,bench]'
	cd bench && ../$(PY) peers.py --out results/peers.json | tee results/peers.md
	$(PY) bench/quality.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
