"""What each torch build downloads on Linux x86_64 (README, "Which torch"): the CPU wheel and the CUDA wheel with
the CUDA packages it brings, for the version requirements.lock pins and this machine's Python.

    .venv/bin/python benchmarks/torch_download.py

CUDA build: pip resolves ``torch==VERSION`` from PyPI alone (a dry run, ignoring this machine's pip settings, so
nothing is downloaded but metadata), and each file's size comes from PyPI's JSON simple API.
CPU build: the size of ``torch==VERSION+cpu`` in PyTorch's CPU index (a HEAD request); where that index cannot be
reached, the size of the wheel pip finds for the same name here, marked as not checked against the index.
Writes benchmarks/torch_download.json and .md.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import platform
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from envfiles import TORCH_CPU_INDEX, canonical, lock_pins  # noqa: E402

PYPI = "https://pypi.org/simple"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _get(url: str, accept: str | None = None, method: str = "GET"):
    request = urllib.request.Request(url, method=method, headers={"Accept": accept} if accept else {})
    return urllib.request.urlopen(request, timeout=30)


def pypi_sizes(name: str) -> dict[str, int]:
    with _get(f"{PYPI}/{name}/", accept="application/vnd.pypi.simple.v1+json") as response:
        return {f["filename"]: f["size"] for f in json.load(response)["files"]}


def cuda_build(version: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
                        "--quiet", "--index-url", PYPI, "--report", str(report), f"torch=={version}"],
                       check=True, timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": tmp})
        resolved = json.loads(report.read_text())["install"]
    files = []
    for item in resolved:
        filename = item["download_info"]["url"].rsplit("/", 1)[-1]
        name = canonical(item["metadata"]["name"])
        files.append({"name": name, "version": item["metadata"]["version"], "file": filename,
                      "bytes": pypi_sizes(name)[filename]})
    cuda = [f for f in files if f["name"] == "torch" or f["name"].startswith(("nvidia-", "cuda-", "triton"))]
    return {"files": sorted(files, key=lambda f: -f["bytes"]),
            "torch_wheel_bytes": next(f["bytes"] for f in files if f["name"] == "torch"),
            "torch_and_cuda_packages_bytes": sum(f["bytes"] for f in cuda),
            "all_bytes": sum(f["bytes"] for f in files)}


def cpu_build(version: str) -> dict:
    filename = f"torch-{version}+cpu-{TAG}-{TAG}-manylinux_2_28_x86_64.whl"
    url = f"{TORCH_CPU_INDEX}/{filename.replace('+', '%2B')}"
    try:
        with _get(url, method="HEAD") as response:
            return {"file": filename, "bytes": int(response.headers["Content-Length"]), "source": url}
    except (urllib.error.URLError, OSError) as error:
        reason = f"{TORCH_CPU_INDEX} not reachable here ({type(error).__name__})"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp,
                        f"torch=={version}+cpu"], check=True, timeout=600)
        (wheel,) = Path(tmp).glob("*.whl")
        return {"file": wheel.name, "bytes": wheel.stat().st_size,
                "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
                "source": f"the wheel pip finds here for torch=={version}+cpu (this machine's package sources); "
                          f"not checked against PyTorch's index: {reason}"}


def main() -> int:
    version = lock_pins()["torch"]
    report = {"command": f".venv/bin/python {' '.join(sys.argv)}",
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
              "machine": f"{platform.platform()}, Python {platform.python_version()}",
              "torch": version, "cpu": cpu_build(version), "cuda": cuda_build(version)}
    out = ROOT / "benchmarks" / "torch_download"
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    mb = lambda n: f"{n / 1e6:,.1f} MB"  # noqa: E731
    cuda, cpu = report["cuda"], report["cpu"]
    rows = "\n".join(f"| {f['file']} | {mb(f['bytes'])} |" for f in cuda["files"])
    out.with_suffix(".md").write_text(f"""# torch's download, CPU and CUDA builds

`{report['command']}` on {report['date'][:10]} ({report['machine']}); the numbers are in `torch_download.json`.
For torch {version} on Linux x86_64, Python {platform.python_version()} (1 MB = 10^6 bytes):

- CPU build (`make` with `TORCH=cpu`, or without an NVIDIA GPU): `{cpu['file']}`, {mb(cpu['bytes'])}.
  Source: {cpu['source']}.
- CUDA build (`TORCH=cuda`, or with one): the torch wheel is {mb(cuda['torch_wheel_bytes'])}; with the CUDA
  packages it requires (nvidia-*, cuda-*, triton) {mb(cuda['torch_and_cuda_packages_bytes'])}; with every
  package pip resolves for it from PyPI, {mb(cuda['all_bytes'])}. Sizes from PyPI's JSON simple API, files from a
  `pip install --dry-run` of `torch=={version}` against PyPI alone.

| file (CUDA build, as resolved) | size |
|---|---|
{rows}
""")
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
