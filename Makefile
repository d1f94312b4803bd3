# Two commands do everything: `make lab` (students) and `make test` (CI, maintainers).
PYTHON ?= python3
VENV := .venv
PIP_VERSION := 26.3
BIN := $(VENV)/bin
# nbgrader runs `alembic` and `jupyter` by name, so the venv's tools come first on PATH.
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Which torch build (README, "Which torch"): TORCH=auto (default) takes the CUDA build on a Linux machine whose
# `nvidia-smi -L` lists a GPU and the CPU build elsewhere; TORCH=cpu or TORCH=cuda chooses. The version is the
# lock's either way. On Linux the CPU build is torch==VERSION+cpu from PyTorch's CPU index (the index that
# binder/environment.yml names too); the CUDA build is PyPI's default Linux wheel; macOS has one build (PyPI's).
TORCH ?= auto
TORCH_VERSION := $(shell sed -n 's/^torch==//p' requirements.lock)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
OS := $(shell uname -s)
ifeq ($(TORCH),auto)
TORCH_BUILD := $(if $(filter Linux,$(OS)),$(if $(shell nvidia-smi -L 2>/dev/null | grep -q GPU && echo yes),cuda,cpu),cpu)
else ifneq ($(filter cpu cuda,$(TORCH)),)
TORCH_BUILD := $(TORCH)
else
$(error TORCH=$(TORCH): use auto, cpu or cuda)
endif
TORCH_CPU_WHEEL := $(and $(filter cpu,$(TORCH_BUILD)),$(filter Linux,$(OS)))
TORCH_INDEX := $(if $(TORCH_CPU_WHEEL),--extra-index-url $(TORCH_CPU_INDEX))
# Only torch comes from PyTorch's index (--no-deps); the next step installs its dependencies at the lock's versions.
TORCH_REQUIREMENT := $(if $(TORCH_CPU_WHEEL),--no-deps torch==$(TORCH_VERSION)+cpu $(TORCH_INDEX),-c requirements.lock torch==$(TORCH_VERSION))
# The stamp names the build, so switching TORCH reinstalls torch.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml requirements.lock | cksum | cut -d' ' -f1)-$(TORCH_BUILD)
NOTEBOOKS := $(wildcard solutions/*/*.ipynb)
ASSIGNMENTS := $(notdir $(patsubst %/,%,$(dir $(NOTEBOOKS))))
# Open a browser only where there is a screen to show it on.
BROWSER_FLAG := $(if $(or $(DISPLAY),$(WAYLAND_DISPLAY),$(filter Darwin,$(shell uname -s))),,--no-browser)
# Jupyter refuses to run as root (containers, some cloud machines) unless told it may.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: lab test tinystories release envfiles lock outputs stamp lint clean hub hub-install hub-start

# An installed CPU build satisfies torch==VERSION too, so it is uninstalled first when the CUDA build is wanted.
export TORCH_IS_CPU_BUILD := import importlib.metadata as m, sys; sys.exit(not m.version("torch").endswith("+cpu"))
$(STAMP): pyproject.toml requirements.lock
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==$(PIP_VERSION)
	$(if $(filter cuda,$(TORCH_BUILD)),@$(BIN)/python -c "$$TORCH_IS_CPU_BUILD" 2>/dev/null && $(BIN)/python -m pip uninstall --quiet -y torch || true)
	$(BIN)/python -m pip install --quiet $(TORCH_REQUIREMENT)
	$(BIN)/python -m pip install --quiet -c requirements.lock -e .
	@rm -f $(VENV)/.installed-*
	@touch $@

# Students' JupyterLab: jupyter/student/ hides nbgrader's instructor tools and the news pop-up, and gives the lab's
# terminals the course's Python first on their PATH, in a shell that is not a login shell (binder/postBuild
# installs the same files). It is added to Jupyter's config path for this server only, so an instructor's own
# `jupyter lab` keeps formgrader. Another folder and extra options: make lab LAB_DIR=../my-copy LAB_ARGS="--port=8899".
# The server runs in the lab's root, where its terminals open, so the command that every notebook prints,
# `python -m autograder check NN_name`, finds the notebook the lab shows in course/ (autograder/notebook_path.py).
STUDENT_CONFIG := $(CURDIR)/jupyter/student
LAB_DIR ?= .
LAB_ARGS ?=

lab: $(STAMP)
	cd "$(LAB_DIR)" && JUPYTER_CONFIG_PATH="$(STUDENT_CONFIG)$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
	  $(CURDIR)/$(BIN)/jupyter lab $(BROWSER_FLAG) $(ROOT_FLAG) --ServerApp.root_dir="$$PWD" --LabApp.default_url=/lab/tree/course $(LAB_ARGS)

# Test workers (pytest-xdist): one per core. The suite is CPU-bound: one more worker than the cores made it no
# faster on the 2-core CI machine (benchmarks/suite_time.md). `make test TEST_WORKERS=N` chooses. solutions/
# (nbval; notebooks 10 and 13 run about a minute each) comes first, so the last tests handed out are short.
TEST_WORKERS ?= auto

# The hub's packages (jupyter/hub/requirements.txt: JupyterHub and the pure-Python proxy, with the lock as
# constraints) go into .venv for the tests only (tests/test_hub.py runs a class on a hub from .venv): `make lab` and
# Binder do without them.
HUB_PACKAGES := $(VENV)/.hub-packages-$(shell cat requirements.lock jupyter/hub/requirements.txt | cksum | cut -d' ' -f1)
$(HUB_PACKAGES): $(STAMP) jupyter/hub/requirements.txt
	$(BIN)/python -m pip install --quiet -c requirements.lock -r jupyter/hub/requirements.txt
	@rm -f $(VENV)/.hub-packages-*
	@touch $@

# The suite starts with `make lint` (ruff's rules and its formatting), so CI's `make test` fails on either.
test: $(STAMP) $(HUB_PACKAGES) lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg solutions tests

# A JupyterHub for a class on one Linux server (docs/instructors.md, "One server"): `make hub`, as root. The first
# run builds the class's environment (`hub-install`) where every account can read it, HUB_PREFIX, from HUB_PYTHON
# (a Python that is not under /root or a home: the system's); then JupyterHub runs in the foreground (Ctrl-C stops
# it and every user's server) with jupyter/hub/jupyterhub_config.py, which says what each setting is for.
#   make hub [HUB_URL=http://:8000] [HUB_STUDENTS=course-students] [HUB_INSTRUCTORS=course-instructors] ...
# `make hub-start` runs the hub from an environment built before (tests/test_hub.py uses .venv: HUB_PREFIX=.venv).
HUB_PREFIX ?= /opt/transformer-course
HUB_PYTHON ?= /usr/bin/python3
HUB_DIR ?= /srv/transformer-course-hub
HUB_URL ?= http://:8000
HUB_INTERNAL_PORTS ?= 8081,8001
HUB_STUDENTS ?= course-students
HUB_INSTRUCTORS ?= course-instructors
HUB_EXCHANGE ?= /usr/local/share/nbgrader/exchange
HUB_ENV = $(abspath $(HUB_PREFIX))
HUB_STAMP := $(HUB_PREFIX)/.installed-$(shell cat pyproject.toml requirements.lock jupyter/hub/requirements.txt | cksum | cut -d' ' -f1)-$(TORCH_BUILD)

hub: $(HUB_STAMP)
	@$(MAKE) --no-print-directory hub-start

hub-install: $(HUB_STAMP)

# pip is quiet, and its installs take minutes: each runs under `class_hub.py step`, which says what it installs and
# how long it has taken, every 10 s. umask 022: what root installs, every account may read. The course's package is
# installed, not linked (no -e): the checkout may lie where the accounts cannot read it.
HUB_STEP = $(HUB_PYTHON) tools/class_hub.py step
$(HUB_STAMP): pyproject.toml requirements.lock jupyter/hub/requirements.txt
	$(HUB_PYTHON) tools/class_hub.py preflight --prefix $(HUB_PREFIX)
	umask 022 && { test -x $(HUB_PREFIX)/bin/python || $(HUB_PYTHON) -m venv $(HUB_PREFIX); }
	umask 022 && $(HUB_STEP) "installing pip $(PIP_VERSION)" -- $(HUB_PREFIX)/bin/python -m pip install --quiet --upgrade pip==$(PIP_VERSION)
	umask 022 && $(HUB_STEP) "installing torch $(TORCH_VERSION) ($(TORCH_BUILD))" -- $(HUB_PREFIX)/bin/python -m pip install --quiet $(TORCH_REQUIREMENT)
	umask 022 && $(HUB_STEP) "installing the course, JupyterHub and the lock's packages" -- $(HUB_PREFIX)/bin/python -m pip install --quiet -c requirements.lock -r jupyter/hub/requirements.txt .
	chmod -R a+rX $(HUB_PREFIX)
	@rm -f $(HUB_PREFIX)/.installed-*
	@touch $@

# The hub's environment is only what it needs: its settings come from here, not from the caller's shell.
hub-start:
	$(HUB_ENV)/bin/python tools/class_hub.py preflight --prefix $(HUB_ENV) --running
	cd jupyter/hub && umask 022 && exec env -i PATH=$(HUB_ENV)/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
	  COURSE_HUB_DIR=$(HUB_DIR) COURSE_HUB_URL=$(HUB_URL) COURSE_HUB_INTERNAL_PORTS=$(HUB_INTERNAL_PORTS) \
	  COURSE_HUB_STUDENTS=$(HUB_STUDENTS) COURSE_HUB_INSTRUCTORS=$(HUB_INSTRUCTORS) COURSE_EXCHANGE=$(HUB_EXCHANGE) \
	  $(HUB_ENV)/bin/jupyterhub -f jupyterhub_config.py

# The capstone's training run, one command on a GPU machine (README, "A GPU for the capstone"):
#   make tinystories CONFIG=gpu_h100 [STACK=reference] [ARGS="--stop-after 2000"]
# STACK=yours (the default) trains the parts of your notebooks 08 and 10; reference, the course's own.
CONFIG ?= cpu_demo
STACK ?= yours
tinystories: $(STAMP)
	$(BIN)/python -m tinystories train --config $(CONFIG) --stack $(STACK) $(ARGS)

# course/ is generated from solutions/ by nbgrader; commit it.
release: $(STAMP) stamp
	@for a in $(ASSIGNMENTS); do $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; done

# Re-execute the solution notebooks whose code cells or checks changed since their outputs were written (their
# outputs are committed and checked by nbval; tools/outputs.py keeps the fingerprints in solutions/outputs.json).
#   make outputs [ONLY="02_normalization 03_rope"] [ALL=1]
ONLY ?=
outputs: $(STAMP) stamp
	$(BIN)/python tools/outputs.py $(if $(ALL),--all) $(ONLY)

# What the exercises' declarations (autograder/notebooks) determine, written into the solution notebooks: the answer
# cells' metadata and ids, each test cell, the headings' numbers (tools/stamp.py).
stamp: $(STAMP)
	$(BIN)/python tools/stamp.py

envfiles: $(STAMP)
	$(BIN)/python tools/envfiles.py write

# After changing pyproject.toml: rebuild the venv from scratch and re-pin everything.
lock:
	rm -rf $(VENV) && $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip==$(PIP_VERSION)
	$(BIN)/python -m pip install --quiet -e . $(TORCH_INDEX)
	$(BIN)/python tools/envfiles.py lock
	$(BIN)/python tools/envfiles.py write
	@touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check . && $(BIN)/ruff format --check autograder tests tools

clean:
	rm -rf $(VENV) .pytest_cache gradebook.db
