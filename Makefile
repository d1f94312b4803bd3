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

.PHONY: lab test tinystories release export envfiles lock outputs lint clean

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
# `python -m autograder check course/NN/NN.ipynb`, checks the notebook the lab shows.
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

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadscope --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg solutions tests

# The capstone's training run, one command on a GPU machine (README, "A GPU for the capstone"):
#   make tinystories CONFIG=gpu_h100 [STACK=reference] [ARGS="--stop-after 2000"]
# STACK=yours (the default) trains the parts of your notebooks 08 and 10; reference, the course's own.
CONFIG ?= cpu_demo
STACK ?= yours
tinystories: $(STAMP)
	$(BIN)/python -m tinystories train --config $(CONFIG) --stack $(STACK) $(ARGS)

# course/ is generated from solutions/ by nbgrader, tinystories/course.py by tools/export_course.py; commit both.
release: $(STAMP) export
	@for a in $(ASSIGNMENTS); do $(BIN)/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; done

# The TinyStories program's copy of the course's model code, exported from the solution notebooks.
export: $(STAMP)
	$(BIN)/python tools/export_course.py

# Re-execute the solution notebooks in place (their outputs are committed and checked by nbval).
outputs: $(STAMP)
	@for nb in $(NOTEBOOKS); do $(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.record_timing=False $$nb --log-level=WARN || exit 1; done

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
