"""Prepare the patched ggml source tree that the package build compiles.

ggml's source is never committed. This script, run by CMakeLists.txt at configure
time, either

* downloads the sdist pinned in vendor/ggml/pin.toml with pip (once: it is kept
  in a cache outside the source tree), checks its sha256 and extracts the ggml
  folder, or
* copies the ggml checkout named by PYGGML_GGML_SOURCE,

then applies vendor/ggml/patches/*.patch in order. A patch that does not apply
stops the build with its name. The result is written to --dest and stamped, so a
reconfigure with the same pin and patches does no work.

With --llama-dest it also prepares llama.cpp's library (libllama): the folders
`src/` and `include/` of the llama.cpp tree in the same sdist (same pin, same hash
check, same cache), or of the llama.cpp checkout named by PYGGML_LLAMA_SOURCE,
patched with vendor/llama/patches/*.patch the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PIN_FILE = ROOT / "vendor" / "ggml" / "pin.toml"
PATCH_DIR = ROOT / "vendor" / "ggml" / "patches"
LLAMA_PATCH_DIR = ROOT / "vendor" / "llama" / "patches"
# the folders of llama.cpp's tree that libllama is built from (common/ and the tools are not), and
# tests/, which holds llama.cpp's generator of random models (built as pyggml's llama-archs)
LLAMA_FOLDERS = ("src", "include", "tests")
OPTIONAL_FOLDERS = ("tests",)  # a checkout without it builds without llama-archs


class FetchError(RuntimeError):
    pass


def cache_dir() -> Path:
    if os.environ.get("PYGGML_CACHE_DIR"):
        return Path(os.environ["PYGGML_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pyggml"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def pip_download(package: str, version: str, into: Path) -> Path:
    """Download the sdist with pip (the ordinary client, whatever index it is set up for).

    --no-binary names only this package, so pip's own build requirements may still come
    as wheels; --no-build-isolation keeps pip from installing a build environment just
    to read the sdist's metadata (scikit-build-core is already present: it builds us).
    """
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-build-isolation",
        "--no-binary",
        package,
        f"{package}=={version}",
        "-d",
        str(into),
    ]
    print("pyggml: downloading", f"{package}=={version}", "(sdist, for its ggml)", flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(into.glob("*.tar.gz"))
    if proc.returncode != 0 or not found:
        raise FetchError(
            f"pip could not download the {package}=={version} sdist:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return found[0]


def cached_sdist(pin: dict) -> Path:
    cache = cache_dir()
    name = f"{pin['package'].replace('-', '_')}-{pin['version']}.tar.gz"
    target = cache / name
    if target.exists() and sha256_of(target) == pin["sha256"]:
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        got = pip_download(pin["package"], pin["version"], Path(tmp))
        digest = sha256_of(got)
        if digest != pin["sha256"]:
            raise FetchError(
                f"{got.name}: sha256 {digest} does not match the pin {pin['sha256']} in {PIN_FILE.relative_to(ROOT)}"
            )
        os.replace(got, target)
    return target


def extract_folders(sdist: Path, folders: dict[str, Path]) -> None:
    """Extract each of the sdist's folders (below its top-level folder) into its destination, in one pass
    over the archive (it is 76 MB of gzip)."""
    found: dict[str, int] = {sub: 0 for sub in folders}
    with tarfile.open(sdist) as tar:
        for m in tar:
            parts = m.name.split("/", 1)
            if len(parts) != 2:
                continue
            for sub, dest in folders.items():
                prefix = sub.rstrip("/") + "/"
                if (parts[1] + "/").startswith(prefix):
                    found[sub] += 1
                    rel = parts[1][len(prefix) :]
                    if rel:
                        tar.extract(m.replace(name=rel), dest, filter="data")
    missing = [sub for sub, n in found.items() if not n]
    if missing:
        raise FetchError(f"{sdist.name} has no folder {', '.join(missing)}")


def patches(skip: frozenset[str] = frozenset(), patch_dir: Path = PATCH_DIR) -> list[Path]:
    return [p for p in sorted(patch_dir.glob("*.patch")) if p.name not in skip]


def apply_patches(tree: Path, skip: frozenset[str], patch_dir: Path = PATCH_DIR, what: str = "ggml") -> None:
    for patch in patches(skip, patch_dir):
        base = ["patch", "-p1", "--batch", "--forward", "-d", str(tree), "-i", str(patch)]
        dry = subprocess.run(base + ["--dry-run"], capture_output=True, text=True)
        if dry.returncode != 0:
            reverse = subprocess.run(
                ["patch", "-p1", "--batch", "-R", "--dry-run", "-d", str(tree), "-i", str(patch)],
                capture_output=True,
                text=True,
            )
            if reverse.returncode == 0:
                print(f"pyggml: {patch.name} is already in this {what} source, skipped", flush=True)
                continue
            raise FetchError(f"patch {patch.name} does not apply to this {what} source:\n{dry.stdout}{dry.stderr}")
        subprocess.run(base, check=True, capture_output=True)
        print(f"pyggml: applied {patch.name}", flush=True)


def stamp_text(
    pin: dict, source: str | None, skip: frozenset[str], patch_dir: Path = PATCH_DIR, folders: tuple[str, ...] = ()
) -> str:
    h = hashlib.sha256()
    h.update(repr(sorted(pin.items())).encode())
    h.update(repr(folders).encode())  # a tree extracted with fewer folders is made again
    h.update((source or "").encode())
    for p in patches(skip, patch_dir):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _prepared(
    dest: Path, want: str, fill: Callable[[], None], skip: frozenset[str], patch_dir: Path, what: str
) -> Path:
    """dest as `fill` writes it and the patches of patch_dir make it, unless its stamp says it already is."""
    stamp = dest / ".pyggml-stamp"
    if stamp.exists() and stamp.read_text() == want:
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    fill()
    apply_patches(dest, skip, patch_dir, what)
    stamp.write_text(want)
    return dest


def _copy_checkout(source: str, header: str, folders: tuple[str, ...] | None, dest: Path, variable: str) -> None:
    src = Path(source)
    if not (src / "include" / header).exists():
        raise FetchError(f"{variable}={source} is not a source tree with include/{header}")
    for folder in folders or [""]:
        if folder in OPTIONAL_FOLDERS and not (src / folder).is_dir():
            continue
        shutil.copytree(
            src / folder, dest / folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "build*")
        )


def prepare(dest: Path, skip: frozenset[str] = frozenset()) -> Path:
    pin = tomllib.loads(PIN_FILE.read_text())
    source = os.environ.get("PYGGML_GGML_SOURCE") or None
    skip = skip & {p.name for p in patches()}  # the rest name llama.cpp's patches (prepare_llama)

    def fill() -> None:
        if source:
            _copy_checkout(source, "ggml.h", None, dest, "PYGGML_GGML_SOURCE")
        else:
            extract_folders(cached_sdist(pin), {pin["subdir"]: dest})

    return _prepared(dest, stamp_text(pin, source, skip), fill, skip, PATCH_DIR, "ggml")


def check_skip(skip: frozenset[str]) -> None:
    """Every name in skip is one of ggml's or llama.cpp's patches."""
    unknown = skip - {p.name for p in patches()} - {p.name for p in patches(patch_dir=LLAMA_PATCH_DIR)}
    if unknown:
        dirs = f"{PATCH_DIR.relative_to(ROOT)} or {LLAMA_PATCH_DIR.relative_to(ROOT)}"
        raise FetchError(f"no patch named {', '.join(sorted(unknown))} in {dirs}")


def prepare_llama(dest: Path, skip: frozenset[str] = frozenset()) -> Path:
    """llama.cpp's src/ and include/ in dest, patched (but for those named in skip): from the pinned sdist
    (its folder pin["llama_subdir"]) or from the llama.cpp checkout PYGGML_LLAMA_SOURCE names."""
    skip = skip & {p.name for p in patches(patch_dir=LLAMA_PATCH_DIR)}
    pin = tomllib.loads(PIN_FILE.read_text())
    source = os.environ.get("PYGGML_LLAMA_SOURCE") or None

    def fill() -> None:
        if source:
            _copy_checkout(source, "llama.h", LLAMA_FOLDERS, dest, "PYGGML_LLAMA_SOURCE")
        else:
            extract_folders(cached_sdist(pin), {f"{pin['llama_subdir']}/{f}": dest / f for f in LLAMA_FOLDERS})

    want = stamp_text(pin, source, skip, LLAMA_PATCH_DIR, LLAMA_FOLDERS)
    return _prepared(dest, want, fill, skip, LLAMA_PATCH_DIR, "llama.cpp")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", required=True, type=Path, help="folder to write the patched ggml tree to")
    parser.add_argument(
        "--skip",
        default="",
        help="ggml or llama.cpp patches to leave out, comma-separated file names (for tests that show what a patch fixes)",
    )
    parser.add_argument("--llama-dest", type=Path, help="also write llama.cpp's patched src/ and include/ here")
    args = parser.parse_args()
    try:
        skip = frozenset(n for n in args.skip.split(",") if n)
        check_skip(skip)
        prepare(args.dest, skip)
        if args.llama_dest:
            prepare_llama(args.llama_dest, skip)
    except FetchError as e:
        print(f"pyggml: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
