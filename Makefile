# Two entry points for a fresh machine (see README):
#   make demo  -- install into .venv, then train on the embedded synthetic graph (2 emulated machines at
#                 1 Gbit/s), exact and with the fast preset, and print and plot the two (demo/)
#   make test  -- install into .venv, then run the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# Debian packages the agent's tests use: the aarch64 cross compiler and qemu-user (the static
# aarch64 sni-agent under emulation), clang + libFuzzer runtime (the protocol fuzz target),
# systemd (systemd-analyze checks the agent's unit for DPUs).
AGENT_TEST_DEBS := g++-aarch64-linux-gnu qemu-user clang libclang-rt-14-dev systemd
# tcmalloc, which dgl-sni train preloads into its servers and trainers (dgl_sni/allocator.py)
RUNTIME_DEBS := libtcmalloc-minimal4
# The compiler flags of every build are declared once, in dpu_agent/csrc/cxxflags.txt
# (setup.py and dpu_agent/binary.py read it too): `common` plus the agent's own line.
CXXFLAGS_FILE := dpu_agent/csrc/cxxflags.txt
cxxflags = $(shell sed -n 's/^$(1):[[:space:]]*//p' $(CXXFLAGS_FILE))
AGENT_CXXFLAGS := $(call cxxflags,common) $(call cxxflags,agent)
# the agent: main.cpp plus one translation unit per transport, each compiled on its own;
# AGENT_SOURCES: all it is built from (make install rebuilds when one changes)
AGENT_HEADERS := $(wildcard dpu_agent/csrc/*.hpp dpu_agent/csrc/agent/*.hpp) $(CXXFLAGS_FILE)
AGENT_UNITS := $(sort $(wildcard dpu_agent/csrc/agent/*.cpp))
AGENT_SOURCES := $(AGENT_HEADERS) $(AGENT_UNITS)
AGENT_AARCH64 := dpu_agent/bin/sni-agent-aarch64
AGENT_AARCH64_OBJECTS := $(patsubst dpu_agent/csrc/agent/%.cpp,build/agent-aarch64/%.o,$(AGENT_UNITS))

.PHONY: install demo test test-slow bench bench-full bench-compare clean agent agent-aarch64 agent-test-deps runtime-deps

$(STAMP): requirements.txt setup.py pyproject.toml dgl_sni_startup.pth $(AGENT_SOURCES) $(wildcard dgl_sni/*.pyx dgl_sni/csrc/* dpu_agent/*.pyx storage_tier/*.pyx storage_tier/csrc/*)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
	touch $(STAMP)

install: $(STAMP) runtime-deps

demo: install
	mkdir -p demo
	printf '[{"preset": "exact"}, {"preset": "fast"}]\n' > demo/sweep.json
	$(VENV)/bin/dgl-sni train --dataset synthetic --workers 2 --model gcn --layers 3 --hidden 16 \
		--epochs 100 --bandwidth 1gbit --sweep demo/sweep.json --metrics demo/runs
	$(VENV)/bin/dgl-sni report demo/runs --labels exact,fast --out demo

test: install agent-test-deps
	$(PY) -m pytest -q

# the x86 agent (setup.py builds it too): dpu_agent/bin/sni-agent
agent: $(STAMP)
	SNI_BUILD_ONLY=sni-agent $(PY) setup.py build_ext --inplace -q

# a static aarch64 agent for BlueField Arm cores (Debian's g++-aarch64-linux-gnu)
agent-aarch64: $(AGENT_AARCH64)
$(AGENT_AARCH64): $(AGENT_AARCH64_OBJECTS)
	mkdir -p dpu_agent/bin
	aarch64-linux-gnu-g++ $(AGENT_CXXFLAGS) -static -o $@ $^ -ldl
build/agent-aarch64/%.o: dpu_agent/csrc/agent/%.cpp $(AGENT_HEADERS)
	@command -v aarch64-linux-gnu-g++ >/dev/null || { echo "install Debian's g++-aarch64-linux-gnu (make agent-test-deps as root)"; exit 1; }
	@mkdir -p $(@D)
	aarch64-linux-gnu-g++ $(AGENT_CXXFLAGS) -c -o $@ $<

# $(call debs,PACKAGES,WHAT): install the Debian packages that are missing when running as root
# (else say which are missing: the tests that need them fail saying what to install)
debs = missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
		else echo "$(2) need the Debian packages:$$missing (not root: install them first)"; fi; \
	fi

agent-test-deps:
	@$(call debs,$(AGENT_TEST_DEBS),the agent's tests)

runtime-deps:
	@$(call debs,$(RUNTIME_DEBS),fast epochs (tcmalloc; dgl-sni train falls back to the system malloc))

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# The benchmark suites, one per subsystem (benchmarks/suites/suite_*.py: collected only here, never by
# make test). Each run is saved to $(BENCH_SAVED)/<machine>/ (pytest-benchmark's JSON, extra_info
# included). bench: the quick suites (not marked long); bench-full: all of them; bench-compare: the
# quick suites again, then what got slower or faster than the run saved before it.
BENCH_SAVED := benchmarks/saved
BENCH_SUITES := $(PY) -m pytest -q benchmarks/suites -o python_files='suite_*.py' --benchmark-enable \
	--benchmark-only --benchmark-storage=$(BENCH_SAVED) --benchmark-autosave
bench: $(STAMP)
	$(BENCH_SUITES) -m 'not long'

bench-full: $(STAMP)
	$(BENCH_SUITES) -m ''

bench-compare: $(STAMP)
	$(BENCH_SUITES) -m 'not long' --benchmark-compare
	$(PY) benchmarks/compare_saved.py --storage $(BENCH_SAVED)

clean:
	rm -rf $(VENV) build *.egg-info dgl_sni/*.so dgl_sni/_ops.cpp dpu_agent/*.so dpu_agent/bin storage_tier/*.so
