#!/usr/bin/env python3
"""Move the upper bounds of pyggml's bounded requirements to the newest releases the tests pass with.

pyproject.toml bounds every build, test and notebook requirement (`mypy>=2.4,<2.5`), so that a fresh
`pip install -e ".[test]"` resolves to versions this project was tested with. This script moves those
bounds, monthly (docs/maintenance.md):

  1. for each Python given (--python; default: every version README names, PYTHONS, each python3.X on PATH or
     pyenv's newest 3.X, and a version with neither stops the run), a fresh virtual environment in a temporary
     folder, pip with no cache: the newest release of every requirement (upper bounds dropped, lower
     bounds and exact pins kept), pyggml built in it with those build requirements
     (--no-build-isolation) and installed editable;
  2. the tests: tests/test_types.py (mypy over the package, the tests and the notebooks) and a quick
     subset by default, the whole README test command with --full;
  3. if every Python passed: each upper bound becomes the next minor release after the newest version
     installed on any of them (`mypy 2.5.1` -> `<2.6`), printed as a diff, and written into
     pyproject.toml with --write. If a Python failed, nothing is written and the new releases are
     listed: fix the code (or keep that package's bound and say why in the commit message).

With --lowest the same runs use the lowest versions the bounds allow (the newest patch release of each
lower bound, `numpy>=2.4` -> `numpy==2.4.*`; with the oldest Python, where old releases have wheels): a
check of the lower bounds, which prints no new bounds.

    python3 tools/bump_pins.py [--python python3.12 ...] [--full] [--write]

Requirements with an exact pin (`gguf==0.19.0`: the tests compare against that release) and `pip` (a
build requirement only for downloading ggml's sdist) are left as they are; the newest release of a
pinned package is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"

# the Pythons README names ("Python 3.11, 3.12 and 3.13"; tests/test_docs.py holds them to it): mypy's verdict,
# the notebooks and the build can differ between them, since the bounds resolve to other releases on each
PYTHONS = ("3.11", "3.12", "3.13")

# quick subset: the typing test, the build and binding tests, a sample of op cases on the CPU
QUICK = [
    "tests/test_types.py",
    "tests/test_build.py",
    "tests/test_safety.py",
    "tests/test_gguf.py",
    "tests/test_check.py",
    "tests/test_pytest_plugin.py",
]

_REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*?)\s*$")


class Requirement:
    """One requirement string of pyproject.toml: name, extras and its version specifiers."""

    def __init__(self, text: str, where: str):
        m = _REQ.match(text)
        if not m or ";" in text:
            raise SystemExit(f"{where}: cannot read requirement {text!r} (markers are not handled)")
        self.text, self.where = text, where
        self.name, self.extras = m.group(1), m.group(2) or ""
        self.specs = [s.strip() for s in m.group(3).split(",") if s.strip()]

    @property
    def key(self) -> str:
        return re.sub(r"[-_.]+", "-", self.name).lower()

    def spec(self, op: str) -> str | None:
        return next((s[len(op) :].strip() for s in self.specs if s.startswith(op) and not s.startswith(op + "=")), None)

    @property
    def exact(self) -> bool:
        return any(s.startswith("==") for s in self.specs)

    @property
    def movable(self) -> bool:
        """Bounded above (pyggml's own dependencies are not: it takes any newer release) and not exact."""
        return not self.exact and self.key != "pip" and self.spec("<") is not None

    def with_upper(self, upper: str) -> str:
        specs = [s for s in self.specs if not s.startswith("<")] + [f"<{upper}"]
        return self.name + self.extras + ",".join(specs)


def requirements() -> list[Requirement]:
    data = tomllib.loads(PYPROJECT.read_text())
    out = [Requirement(t, "build-system.requires") for t in data["build-system"]["requires"]]
    out += [Requirement(t, "project.dependencies") for t in data["project"]["dependencies"]]
    for extra, reqs in data["project"].get("optional-dependencies", {}).items():
        out += [Requirement(t, f"project.optional-dependencies.{extra}") for t in reqs]
    return out


def _key(text: str) -> str:
    return re.sub(r"[-_.]+", "-", _REQ.match(text).group(1)).lower()  # type: ignore[union-attr]


def _version(v: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", v)]


def merged(reqs: list[Requirement], mode: str) -> list[str]:
    """One requirement per package for pip: the newest releases (upper bounds dropped, every lower
    bound and exact pin kept), or the lowest (the highest lower bound among its mentions, exact)."""
    out = []
    for key in dict.fromkeys(r.key for r in reqs):
        group = [r for r in reqs if r.key == key]
        fixed = next((r for r in group if r.exact or r.key == "pip"), None)
        if fixed is not None:
            out.append(fixed.text)
        elif mode == "newest":
            specs = dict.fromkeys(s for r in group for s in r.specs if not s.startswith("<"))
            out.append(group[0].name + ",".join(specs))
        else:
            lows = [low for r in group if (low := r.spec(">=")) is not None]
            if not lows:
                out.append(group[0].name)
                continue
            low = max(lows, key=_version)
            parts = (low.split(".") + ["0"])[: max(2, low.count(".") + 1)]
            out.append(f"{group[0].name}=={'.'.join(parts)}" + (".*" if low.count(".") < 2 else ""))
    return out


def next_minor(version: str) -> str:
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]] + [0]
    return f"{parts[0]}.{parts[1] + 1}"


def latest_release(name: str) -> str:
    """What pip says of a package's releases (`pip index versions`), for exact pins moved by hand."""
    out = subprocess.run([sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True)
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else "newest release unknown"


def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, **kw)


def check_python(python: str, reqs: list[Requirement], mode: str, full: bool) -> tuple[bool, dict[str, str]]:
    """Fresh venv with python, the chosen releases, pyggml built and the tests run: (passed, versions)."""
    env = dict(os.environ, PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("PYTHONPATH", None)
    with tempfile.TemporaryDirectory(prefix="pyggml-pins-") as tmp:
        venv = Path(tmp) / "venv"
        if run([python, "-m", "venv", str(venv)], env=env).returncode:
            raise SystemExit(f"{python}: could not make a virtual environment")
        py = str(venv / "bin" / "python")
        wanted = merged(reqs, mode)
        run(
            [py, "-m", "pip", "install", "-q", "--upgrade", *[w for w in wanted if _key(w) == "pip"]],
            env=env,
            check=True,
        )
        # everything in one resolution, so the versions fit each other; pyggml itself without its
        # dependencies (they are in the list), built with the build requirements installed here, in a
        # build folder of its own (not the checkout's build/, configured for another environment)
        if run([py, "-m", "pip", "install", "-q", *[w for w in wanted if _key(w) != "pip"]], env=env).returncode:
            print(f"{python}: the {mode} releases do not install together", flush=True)
            return False, {}
        if run(
            [
                py,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                f"--config-settings=build-dir={tmp}/build",
                "-e",
                ".",
            ],
            cwd=ROOT,
            env=env,
        ).returncode:
            print(f"{python}: pyggml did not build with the {mode} releases", flush=True)
            return False, {}
        label = run(
            [py, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
        ).stdout.strip()
        listed = run([py, "-m", "pip", "list", "--format", "json"], env=env, capture_output=True, text=True, check=True)
        versions = {re.sub(r"[-_.]+", "-", p["name"]).lower(): p["version"] for p in json.loads(listed.stdout)}
        versions["python"] = label
        tests = [] if full else QUICK
        # another folder's conftest or plugins must not join in: run from the repository, -p no:cacheprovider
        # leaves no .pytest_cache behind; randomly (when a developer has it) is left out, as in README
        ok = run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT, env=env).returncode == 0
        return ok, versions


def find_python(version: str) -> str:
    """python3.X on PATH, else pyenv's newest 3.X (as scripts/python_versions.sh finds them); none stops the run,
    since a Python left out would read as one that passed."""
    found = shutil.which(f"python{version}")
    if found and subprocess.run([found, "-c", ""], capture_output=True).returncode == 0:  # a pyenv shim may not run
        return found
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for d in sorted(root.glob(f"{version}.*"), key=lambda d: _version(d.name), reverse=True):
        if (d / "bin" / f"python{version}").is_file():
            return str(d / "bin" / f"python{version}")
    raise SystemExit(
        f"no Python {version} on this machine (PATH or pyenv): install it, or name the ones to run (--python)"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", action="append", help="an interpreter to test with (repeat; default: each of PYTHONS)")
    ap.add_argument("--full", action="store_true", help="run the whole suite (README's test command)")
    ap.add_argument("--lowest", action="store_true", help="check the lower bounds instead")
    ap.add_argument("--write", action="store_true", help="write the new upper bounds into pyproject.toml")
    args = ap.parse_args(argv)
    pythons = args.python or [find_python(v) for v in PYTHONS]
    for p in pythons:
        if shutil.which(p) is None and not Path(p).is_file():
            ap.error(f"no interpreter {p!r}")
    reqs = requirements()
    mode = "lowest" if args.lowest else "newest"
    results = {p: check_python(p, reqs, mode, args.full) for p in pythons}

    print(f"\n{'requirement':40} " + " ".join(f"{results[p][1].get('python', p[-12:]):>12}" for p in pythons))
    for r in reqs:
        print(f"{r.text:40} " + " ".join(f"{results[p][1].get(r.key, '-'):>12}" for p in pythons))
    failed = [p for p, (ok, _) in results.items() if not ok]
    if failed:
        print(f"\nthe tests failed with the {mode} releases on: {', '.join(failed)}; pyproject.toml left as it is")
        return 1
    if args.lowest:
        print("\nthe lower bounds hold")
        return 0

    text, changes = PYPROJECT.read_text(), []
    for r in reqs:
        seen = [results[p][1][r.key] for p in pythons if r.key in results[p][1]]
        if not seen:
            continue
        newest = max(seen, key=_version)
        if not r.movable:
            if r.exact:
                print(f"{r.name}: pinned to {r.spec('==')} (not moved); {latest_release(r.name)}")
            continue
        # a bound only moves up: one Python may not have the newest releases another has
        upper = max(next_minor(newest), r.spec("<") or "0", key=_version)
        new = r.with_upper(upper)
        if new != r.text:
            changes.append((r, new))
            text = text.replace(f'"{r.text}"', f'"{new}"')
    if not changes:
        print("\nthe bounds are current")
        return 0
    print()
    for r, new in changes:
        print(f"{r.where}: {r.text}  ->  {new}")
    if args.write:
        PYPROJECT.write_text(text)
        print("written to pyproject.toml: commit it with the versions above in the message")
    else:
        print("(--write writes them into pyproject.toml)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
