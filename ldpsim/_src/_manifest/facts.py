"""The facts a manifest records about where a command ran: the software (ldpsim's git commit
and the versions of its dependencies), the hardware, the environment variables that change
how JAX/XLA/ldpsim run, and each dataset's files with their checksums.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "dataset_record", "environment", "hardware", "software"]

#: Distributions whose versions are recorded (importlib.metadata names).
PACKAGES = ("jax", "jaxlib", "flax", "optax", "dp-accounting", "numpy", "scipy")
_ENV_PREFIXES = ("XLA_", "JAX_", "LDPSIM_", "TF_CPP_", "CUDA_VISIBLE_DEVICES", "TPU_")


def _git() -> dict[str, Any]:
    """Commit of the checkout ldpsim is imported from (null when it is not one): the
    ``ldpsim`` package folder must sit at the top of a git work tree."""
    package = Path(__file__).resolve().parents[2]   # ldpsim/_src/_manifest/facts.py -> ldpsim/
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(package.parent), *args], capture_output=True,
                                  text=True, timeout=10, env=env, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if not top or Path(top).resolve() != package.parent:
        return {"git_commit": None, "git_dirty": None}
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def software() -> dict[str, Any]:
    from importlib import metadata

    from ldpsim import __version__

    out: dict[str, Any] = {"ldpsim": __version__, **_git(),
                           "python": platform.python_version(),
                           "python_implementation": platform.python_implementation()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model", "Processor"):
                    return value.strip() or None
    except OSError:
        pass
    return platform.processor() or None


def hardware() -> dict[str, Any]:
    out: dict[str, Any] = {"backend": None, "device_count": None, "device_kinds": None,
                           "process_count": None}
    try:
        import jax

        devices = jax.devices()
        out.update(backend=jax.default_backend(), device_count=len(devices),
                   device_kinds=sorted({d.device_kind for d in devices}),
                   process_count=jax.process_count())
    except Exception:  # noqa: BLE001 - no backend is a fact to record, not an error
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover (not Linux)
        cpus = os.cpu_count()
    out.update(cpu_model=_cpu_model(), cpu_count=cpus, host=platform.node() or None,
               os=platform.platform())
    return out


def environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


def dataset_record(dataset: str, data_dir: str | os.PathLike | None = None,
                   data_source: str = "auto") -> dict[str, Any]:
    """Where a dataset's files are and their checksums (the values ldpsim.data verifies).

    Returns:
        ``{"dataset", "source", "folder", "files"}``; ``files`` maps a file (relative to
        ``folder``) to ``{"bytes", "sha256", "expected_sha256"}`` (FEMNIST:
        ``expected_md5`` of the known LEAF shards instead), or is null for generated data.
        Files not present yet (to be downloaded) have null ``bytes`` and ``sha256``.
    """
    from ldpsim._src.data import _files, idx, leaf, shakespeare

    key = str(dataset).strip().lower().replace("-", "_")
    record: dict[str, Any] = {"dataset": dataset, "source": None, "folder": None, "files": None}
    if key.startswith("synthetic"):
        record["source"] = "generated (no files; determined by the settings and the seed)"
        return record
    root = _files.resolve_data_dir(data_dir)

    def files(folder: Path | None, expected: Mapping[str, str], algo: str = "sha256"):
        if folder is None:
            return None
        out = {}
        for name, digest in expected.items():
            path = folder / name
            present = path.is_file()
            entry = {"bytes": path.stat().st_size if present else None}
            if algo == "sha256":
                entry["sha256"] = _files.sha256_of(path) if present else None
            entry[f"expected_{algo}"] = digest
            out[name] = entry
        return out

    if key in idx.IDX_DATASETS and data_source in ("auto", "idx"):
        folder = _files.find_subdir(root, (key,), idx.FILES[:1])
        record.update(source="idx", folder=str(folder) if folder else None,
                      files=files(folder, idx.IDX_DATASETS[key]["sha256"]))
    elif key == "shakespeare":
        folder = _files.find_subdir(root, shakespeare.FOLDER_NAMES, (shakespeare.FILES["train"],))
        record.update(source="tff-hdf5", folder=str(folder) if folder else None,
                      files=files(folder, shakespeare.SHA256))
    elif key == "femnist":
        folder = _files.find_subdir(root, leaf.FOLDER_NAMES, ("train", "test"))
        known = {}
        if folder is not None:
            for split in ("train", "test"):
                for path in sorted((folder / split).glob("*.json*")):
                    rel = f"{split}/{path.name}"
                    known[rel] = leaf.KNOWN_JSON_MD5.get(rel.removesuffix(".gz"))
        record.update(source="leaf-json", folder=str(folder) if folder else None,
                      files=files(folder, known, "md5") if folder else None)
    else:
        record["source"] = "tfds (checksums are kept by tensorflow-datasets)"
    return record
