# Two commands do everything: `make lab` and `make test`. Each creates .venv if missing and
# installs the pinned environment (environment.yml's pip list) once; later runs skip that.
PYTHON ?= python3
# Python may write bytecode caches here even where the environment says not to: without
# them every process compiles labkit's 45,000 lines again, and the test run starts
# hundreds (kernels, graders, answer processes). Measured on a 2-core machine: collecting
# the suite 20 s -> 9 s, grading chapter 00 once 5.2 s -> 3.7 s. (An empty value is unset.)
export PYTHONDONTWRITEBYTECODE :=
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed
JOBS   ?= 2
# `make test` runs one pytest worker more than the 2 cores it is sized for: many tests wait
# (a kernel starting, gloo ranks meeting, a browser settling, a time-out running out), and
# with two workers the cores were busy 86 % of the run (user+sys 26.8 min over 15.6 min).
TEST_JOBS ?= 3
SUBMISSIONS ?= submissions
OUTDIR ?= grades

.PHONY: lab test notebooks grade release bench browser-deps clean-venv

$(STAMP): environment.yml pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	sed -n 's/^ *- \([A-Za-z][A-Za-z0-9_.-]*==[^ ]*\)$$/\1/p' environment.yml > $(VENV)/requirements.txt
	$(PY) -m pip install -q -r $(VENV)/requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (labkit)" >/dev/null
	touch $@

# Debian's Chromium for the real-browser test (never `playwright install`: it downloads).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null); \
	  else echo "chromium not found and cannot apt-get it: the browser test will be skipped"; fi; }

ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab $(ROOT_FLAG) $(LAB_ARGS) notebooks/00_start_here.ipynb

test: $(STAMP) browser-deps
	$(PY) -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=300 --durations=10 -W ignore::DeprecationWarning tests notebooks solutions

# Syncs each solutions/NN_slug.ipynb from its text source NN_slug.py, then writes notebooks/
# and the README's chapter table (`--check`: only report what is stale or drifted).
notebooks: $(STAMP)
	$(PY) -m labkit.grade.generate

# make grade SUBMISSIONS=dir [CHAPTERS="2 5"] [NOTEBOOKS="02_autodiff"]: one assignment or all
grade: $(STAMP)
	$(VENV)/bin/labkit-grade $(SUBMISSIONS) --out $(OUTDIR) --jobs $(JOBS) \
	  $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS))

# make release OUT=dir: the student release (notebooks and labkit without the references)
release: $(STAMP)
	@test -n "$(OUT)" || { echo "usage: make release OUT=dir"; exit 2; }
	$(PY) -m labkit.grade.release $(OUT)

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean-venv:
	rm -rf $(VENV)
