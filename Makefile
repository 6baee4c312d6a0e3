VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip

.PHONY: test demo venv clean

$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test,plot]'
	touch $@

venv: $(VENV)/.installed

test: $(VENV)/.installed
	$(PY) -m pytest

demo: $(VENV)/.installed
	$(VENV)/bin/ctxledger demo

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
