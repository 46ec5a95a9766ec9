# Two entry points for a fresh machine (see README):
#   make demo  -- install into .venv, then train on the embedded synthetic graph (2 emulated machines)
#   make test  -- install into .venv, then run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow bench clean

$(STAMP): requirements.txt setup.py pyproject.toml $(wildcard dgl_sni/*.pyx dgl_sni/csrc/* dpu_agent/*.pyx dpu_agent/csrc/* storage_tier/*.pyx storage_tier/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/dgl-sni train --dataset synthetic --workers 2 --model gcn --layers 3 --hidden 16 \
		--epochs 100 --metrics demo-metrics.json

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) -m pytest -q benchmarks --benchmark-enable --benchmark-only

clean:
	rm -rf $(VENV) build *.egg-info dgl_sni/*.so dgl_sni/_ops.cpp dpu_agent/*.so storage_tier/*.so
