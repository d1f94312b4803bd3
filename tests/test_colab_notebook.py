"""colab/tinystories_colab.ipynb runs end to end, here on a CPU with a tiny model, and its packages are the lock's.

The notebook is executed as Colab would (every cell in order), with its parameters cell followed by an injected
one (papermill's convention): the course is this checkout (no clone), nothing is installed, there is no Drive,
and the gpu_t4 config is shrunk to a tiny model on the shipped sample, on the CPU in fp32. A first run stops at a
step with a checkpoint, as a session that ends does; the second continues it with --resume.
"""

from __future__ import annotations

import json
import sys

import nbformat
from nbclient import NotebookClient
from notebooks import ROOT

sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import colab_requirements  # noqa: E402
import envfiles  # noqa: E402
from tinystories_gpu import TINY  # noqa: E402

NOTEBOOK = ROOT / "colab" / "tinystories_colab.ipynb"


def _execute(tmp_path, stop_after):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (index,) = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
    overrides = [
        *TINY,
        "data.source=sample",
        f"data.dir={tmp_path}/data",
        "train.device=cpu",
        "train.precision=fp32",
        "train.max_steps=8",
        "train.warmup_steps=2",
        "train.eval_interval=4",
        "train.eval_batches=1",
        "sample.n=1",
        "sample.max_new_tokens=8",
    ]
    injected = "\n".join(
        [
            f"REPO = {str(ROOT)!r}",
            "NOTEBOOKS = 'none'",
            "INSTALL = False",
            f"RUN_DIR = {str(tmp_path / 'run')!r}",
            f"OVERRIDES = {overrides!r}",
            "PREFLIGHT_STEPS = 4",
            "CHECKPOINT_MINUTES = 1e-4",
            f"STOP_AFTER = {stop_after!r}",
        ]
    )
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(injected, id="injected-parameters"))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _text(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_the_notebook_trains_stops_resumes_and_shows_the_curve_and_stories(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    first = _execute(tmp_path, stop_after=4)
    cells = {c.id: c for c in first.cells}
    assert "FAIL" not in _text(cells["preflight"]) and "a checkpoint every" in _text(cells["preflight"])
    assert (tmp_path / "run" / "checkpoint.pt").is_file()

    second = _execute(tmp_path, stop_after=None)  # as after a disconnection: the checkpoint is there
    cells = {c.id: c for c in second.cells}
    assert all(c.execution_count for c in second.cells if c.cell_type == "code"), "every cell ran"
    assert "the run continues from it (--resume)" in _text(cells["train"])
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9)), steps
    assert (tmp_path / "run" / "loss_curve.png").stat().st_size > 0
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in cells["results"].outputs)
    stories = _text(cells["results"])
    assert "--- 1 ---" in stories and "Once upon a time" in stories


def test_the_notebook_has_a_parameters_cell_and_opens_in_colab():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and 'CONFIG = "gpu_t4"' in parameters[0].source
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "committed without outputs"
    badge = "colab.research.google.com/github/{}/blob/main/colab/tinystories_colab.ipynb"
    for text in ((ROOT / "README.md").read_text(), nb.cells[0].source):
        assert badge.format(envfiles_repo()) in text


def envfiles_repo():
    sys.path.insert(0, str(ROOT / "tools"))
    import repo_links

    return repo_links.repository()


def test_colab_requirements_are_the_lock_without_torch_and_its_own_packages():
    lock = envfiles.lock_pins()
    listed = colab_requirements.requirements()
    names = {line.split("==")[0] for line in listed}
    assert all(f"{name}=={lock[name]}" in listed for name in names), "exact versions of the lock"
    left_out = set(lock) - names
    assert "torch" in left_out and {"sympy", "networkx", "filelock", "jinja2"} <= left_out
    assert {"numpy", "einops", "matplotlib", "tokenizers", "nbformat"} <= names


def test_colab_requirements_leave_out_cuda_packages_and_what_the_installed_torch_needs():
    pins = {
        "torch": "2.13.0",
        "triton": "3.7.1",
        "nvidia-cublas": "13.1.1.3",
        "cuda-bindings": "13.5.0",
        "sympy": "1.14.0",
        "mpmath": "1.3.0",
        "numpy": "2.4.6",
        "einops": "0.8.2",
    }
    metadata = {
        "torch": [
            "sympy>=1.13.3",
            "nvidia-cublas==13.1.1.3; platform_system == 'Linux'",
            "optree>=0.13.0; extra == 'optree'",
        ],
        "sympy": ["mpmath<1.4,>=1.1.0"],
        "mpmath": [],
    }

    def requires(name):
        if name not in metadata:
            raise colab_requirements.importlib.metadata.PackageNotFoundError(name)
        return metadata[name]

    closure = colab_requirements.torch_closure(requires)
    assert closure == {"torch", "sympy", "mpmath", "nvidia-cublas"}
    assert colab_requirements.requirements(pins, closure) == ["einops==0.8.2", "numpy==2.4.6"]


def test_colab_requirements_name_the_pinned_torch():
    assert colab_requirements.pinned_torch() == envfiles.lock_pins()["torch"]
