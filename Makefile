VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: test lint demo bench fuzz soak venv clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,plot,lint]'
	touch $@

venv: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest

# The random property search (make test runs fixed examples): many examples, a fresh seed each
# run, finds kept in .hypothesis/ and replayed next time. Pin each find as an @example.
fuzz: $(VENV)/.installed
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest tests/unit tests/property tests/contract \
		tests/integration/test_salvage_losses.py -p no:cacheprovider

# SIGKILL soak (bench/soak.py): 100 kills on LMDB, then 100 on PostgreSQL with 10 server kills.
soak: $(VENV)/.installed
	$(PY) bench/soak.py --kills 100
	$(PY) bench/soak.py --postgres --kills 100 --server-kills 10

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
