"""The wheels the GPU check carries: every package eapo needs at run time (its dependencies, and
theirs) that the GPU machine's image lacks (scripts/gpu_device_packages.txt), at the versions
installed here, for the machine's Python 3.12 on x86-64.

    python scripts/gpu_check_deps.py --list            # the names and versions, one a line
    python scripts/gpu_check_deps.py --download DIR    # pip download them (no deps) into DIR

Run by ``scripts/gpu_check.sh --build`` and ``--dry-run`` (which fails when a package eapo needs is
neither on the machine nor here to carry, so the list cannot rot unseen).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: pip's platform tags for the GPU machine (x86-64, glibc >= 2.28, CPython 3.12)
PLATFORMS = [
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
#: markers that never hold there (Python 3.12 on Linux): requirements behind them are skipped
_NEVER = re.compile(
    r"python_version\s*<\s*['\"]3\.(1[01]|[0-9])['\"]|sys_platform\s*==\s*['\"](win32|darwin|emscripten)|platform_system\s*==\s*['\"](Windows|Darwin)|extra\s*=="
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def device_packages() -> set[str]:
    lines = (HERE / "gpu_device_packages.txt").read_text(encoding="utf-8").splitlines()
    return {_norm(line) for line in lines if line.strip() and not line.startswith("#")}


def needed() -> dict[str, str | None]:
    """Every run-time dependency of eapo (transitively) missing from the device image: name -> the
    version installed here (None: not installed here, so it cannot be carried)."""
    on_device = device_packages()
    seen: dict[str, str | None] = {}

    def walk(requirement: str) -> None:
        name = _norm(re.match(r"[A-Za-z0-9_.-]+", requirement).group(0))
        if name in seen or name in on_device:
            return
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            seen[name] = None
            return
        seen[name] = dist.version
        for child in dist.requires or []:
            if ";" in child and _NEVER.search(child.split(";", 1)[1]):
                continue
            walk(child)

    for requirement in metadata.distribution("eapo").requires or []:
        if ";" in requirement and _NEVER.search(requirement.split(";", 1)[1]):
            continue
        walk(requirement)
    return dict(sorted(seen.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--list", action="store_true")
    group.add_argument("--download", metavar="DIR")
    args = parser.parse_args()
    wheels = needed()
    missing = sorted(name for name, version in wheels.items() if version is None)
    if missing:
        print(
            "gpu_check_deps: eapo needs " + ", ".join(missing) + ", which neither the GPU machine's image "
            "(scripts/gpu_device_packages.txt) nor this environment has: install them here (make venv) "
            "so they can be carried",
            file=sys.stderr,
        )
        return 1
    if args.list:
        for name, version in wheels.items():
            print(f"{name}=={version}")
        return 0
    target = Path(args.download)
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", "3.12", "--implementation", "cp", "-d", str(target)]
    for platform in PLATFORMS:
        command += ["--platform", platform]
    command += [f"{name}=={version}" for name, version in wheels.items()]
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
