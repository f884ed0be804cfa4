# Two commands do everything: `make lab` and `make test`. Each creates .venv if missing and
# installs the pinned environment (environment.yml's pip list) once; later runs skip that.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.labkit-installed
JOBS   ?= 2
SUBMISSIONS ?= submissions
OUTDIR ?= grades

.PHONY: lab test notebooks grade bench browser-deps clean-venv

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
	$(PY) -m pytest -n $(JOBS) --dist loadfile --nbval-lax --nbval-current-env \
	  --nbval-cell-timeout=300 --durations=10 -W ignore::DeprecationWarning tests notebooks solutions

notebooks: $(STAMP)
	$(PY) -m labkit.grade.generate

# make grade SUBMISSIONS=dir [CHAPTERS="2 5"] [NOTEBOOKS="02_autodiff"]: one assignment or all
grade: $(STAMP)
	$(VENV)/bin/labkit-grade $(SUBMISSIONS) --out $(OUTDIR) --jobs $(JOBS) \
	  $(if $(CHAPTERS),--chapters $(CHAPTERS)) $(if $(NOTEBOOKS),--notebooks $(NOTEBOOKS))

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean-venv:
	rm -rf $(VENV)
