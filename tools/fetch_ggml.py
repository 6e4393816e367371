"""Prepare the patched ggml source tree that the package build compiles.

ggml's source is never committed. This script, run by CMakeLists.txt at configure
time, either

* downloads the sdist pinned in vendor/ggml/pin.toml with pip (once: it is kept
  in a cache outside the source tree), checks its sha256 and extracts the ggml
  folder, or
* copies the ggml checkout named by PYGGML_GGML_SOURCE,

then applies vendor/ggml/patches/*.patch in order, as PYGGML_PATCHES chooses:

* `all` (the default for the pinned sdist): every patch; for the pin one that does not apply stops the build;
* `none` (the default for a tree of the user's, PYGGML_GGML_SOURCE or PYGGML_LLAMA_SOURCE: the user tests
  their code, not ours);
* names, comma-separated (`0006-cpu-set-rows-threads.patch`, the `.patch` optional, or the number `0006`;
  llama.cpp's patches as `llama/0004`): those only;
* `strict` added to any of them (`all,strict`): a patch that does not apply stops the build; without it, on a
  user's tree, it is skipped and the reason recorded.

The result is written to --dest and stamped, so a reconfigure with the same source, pin and patches does no
work. With --record FILE, what was built is written there as JSON (the tree: pin or folder, ggml's version;
each patch applied or skipped, with the reason), for `python -m pyggml info` and the findings.

With --llama-dest it also prepares llama.cpp's library (libllama): the folders
`src/` and `include/` of the llama.cpp tree in the same sdist (same pin, same hash
check, same cache), or of the llama.cpp checkout named by PYGGML_LLAMA_SOURCE,
patched with vendor/llama/patches/*.patch the same way.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
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


class PatchChoice:
    """What PYGGML_PATCHES asks for (the module docstring): which patches, and whether one that does not apply
    stops the build."""

    def __init__(self, text: str | None, user_tree: bool) -> None:
        words = [w.strip() for w in (text or "").split(",") if w.strip()]
        self.strict = "strict" in words or (not words and not user_tree)  # the pin's series must apply whole
        words = [w for w in words if w != "strict"] or (["all"] if words else [])  # strict alone: all, strictly
        self.text = text or ""
        self.names: frozenset[str] | None = None  # None: every patch
        if words == ["none"] or (not words and user_tree):
            self.names = frozenset()
        elif words and words != ["all"]:
            known = {}
            for d in (PATCH_DIR, LLAMA_PATCH_DIR):
                for p in d.glob("*.patch"):
                    key = _patch_key(p, d)  # 0006-cpu-set-rows-threads, llama/0004-...
                    known[key] = known[key.split("-", 1)[0]] = p.name  # and its number alone: 0006, llama/0004
            chosen = set()
            for w in words:
                key = w.removesuffix(".patch")
                if key not in known:
                    raise FetchError(
                        f"PYGGML_PATCHES: no patch named {w!r} (all, none, strict, or names of "
                        f"{PATCH_DIR.relative_to(ROOT)} and {LLAMA_PATCH_DIR.relative_to(ROOT)}: 0006, "
                        "0006-cpu-set-rows-threads.patch, llama/0004)"
                    )
                chosen.add(known[key])
            self.names = frozenset(chosen)

    def wants(self, patch: Path) -> bool:
        return self.names is None or patch.name in self.names


def _patch_key(patch: Path, patch_dir: Path) -> str:
    name = patch.name.removesuffix(".patch")
    return f"llama/{name}" if patch_dir == LLAMA_PATCH_DIR else name


def apply_patches(
    tree: Path,
    skip: frozenset[str],
    patch_dir: Path = PATCH_DIR,
    what: str = "ggml",
    choice: PatchChoice | None = None,
) -> list[dict]:
    """Apply the chosen patches of patch_dir in order; return a record per patch: applied, already in the
    source, not chosen, or skipped with the reason (a patch that does not apply, unless choice.strict)."""
    choice = choice or PatchChoice("all", user_tree=False)
    if shutil.which("patch") is None:
        raise SystemExit(
            "pyggml: GNU patch not found (it applies the patches to ggml): on Debian or Ubuntu: sudo apt-get install patch"
        )
    record = []
    for patch in sorted(patch_dir.glob("*.patch")):
        if patch.name in skip or not choice.wants(patch):
            record.append({"name": patch.name, "state": "not chosen"})
            continue
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
                record.append({"name": patch.name, "state": "already in the source"})
                continue
            failed = [ln for ln in (dry.stdout + dry.stderr).splitlines() if "FAILED" in ln or "can't find" in ln]
            reason = "; ".join(failed[:4]) or (dry.stdout + dry.stderr).strip()[-300:]
            if choice.strict:
                raise FetchError(f"patch {patch.name} does not apply to this {what} source:\n{dry.stdout}{dry.stderr}")
            print(f"pyggml: {patch.name} does not apply to this {what} source, skipped: {reason}", flush=True)
            record.append({"name": patch.name, "state": "does not apply", "reason": reason})
            continue
        subprocess.run(base, check=True, capture_output=True)
        print(f"pyggml: applied {patch.name}", flush=True)
        record.append({"name": patch.name, "state": "applied"})
    return record


def stamp_text(
    pin: dict,
    source: str | None,
    skip: frozenset[str],
    patch_dir: Path = PATCH_DIR,
    folders: tuple[str, ...] = (),
    choice: str = "",
) -> str:
    h = hashlib.sha256()
    h.update(repr(sorted(pin.items())).encode())
    h.update(repr(folders).encode())  # a tree extracted with fewer folders is made again
    h.update((source or "").encode())
    h.update(choice.encode())
    for p in patches(skip, patch_dir):
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def _prepared(
    dest: Path,
    want: str,
    fill: Callable[[], None],
    skip: frozenset[str],
    patch_dir: Path,
    what: str,
    choice: PatchChoice | None = None,
) -> list[dict]:
    """dest as `fill` writes it and the chosen patches of patch_dir make it, unless its stamp says it already
    is; the patches' record (kept beside the stamp)."""
    stamp, kept = dest / ".pyggml-stamp", dest / ".pyggml-patches.json"
    if stamp.exists() and stamp.read_text() == want and kept.exists():
        return json.loads(kept.read_text())
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    fill()
    record = apply_patches(dest, skip, patch_dir, what, choice)
    kept.write_text(json.dumps(record))
    stamp.write_text(want)
    return record


def ggml_root(source: str) -> Path:
    """The ggml folder of PYGGML_GGML_SOURCE: ggml's own repository (include/ggml.h at its root), llama.cpp's
    ggml/ folder, or a llama.cpp checkout (its ggml/)."""
    src = Path(source)
    if not (src / "include" / "ggml.h").exists() and (src / "ggml" / "include" / "ggml.h").exists():
        return src / "ggml"
    return src


def _copy_checkout(source: str, header: str, folders: tuple[str, ...] | None, dest: Path, variable: str) -> None:
    src = ggml_root(source) if header == "ggml.h" else Path(source)
    if not (src / "include" / header).exists():
        raise FetchError(f"{variable}={source} is not a source tree with include/{header}")
    for folder in folders or [""]:
        if folder in OPTIONAL_FOLDERS and not (src / folder).is_dir():
            continue
        shutil.copytree(
            src / folder, dest / folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".git", "build*")
        )


def _user_tree() -> bool:
    return bool(os.environ.get("PYGGML_GGML_SOURCE") or os.environ.get("PYGGML_LLAMA_SOURCE"))


def choice_from_env() -> PatchChoice:
    return PatchChoice(os.environ.get("PYGGML_PATCHES"), _user_tree())


def prepare(dest: Path, skip: frozenset[str] = frozenset(), choice: PatchChoice | None = None) -> list[dict]:
    pin = tomllib.loads(PIN_FILE.read_text())
    source = os.environ.get("PYGGML_GGML_SOURCE") or None
    choice = choice or choice_from_env()
    skip = skip & {p.name for p in patches()}  # the rest name llama.cpp's patches (prepare_llama)

    def fill() -> None:
        if source:
            _copy_checkout(source, "ggml.h", None, dest, "PYGGML_GGML_SOURCE")
        else:
            extract_folders(cached_sdist(pin), {pin["subdir"]: dest})

    want = stamp_text(pin, source, skip, choice=f"{choice.text}/{_user_tree()}")
    return _prepared(dest, want, fill, skip, PATCH_DIR, "ggml", choice)


def check_skip(skip: frozenset[str]) -> None:
    """Every name in skip is one of ggml's or llama.cpp's patches."""
    unknown = skip - {p.name for p in patches()} - {p.name for p in patches(patch_dir=LLAMA_PATCH_DIR)}
    if unknown:
        dirs = f"{PATCH_DIR.relative_to(ROOT)} or {LLAMA_PATCH_DIR.relative_to(ROOT)}"
        raise FetchError(f"no patch named {', '.join(sorted(unknown))} in {dirs}")


def prepare_llama(dest: Path, skip: frozenset[str] = frozenset(), choice: PatchChoice | None = None) -> list[dict]:
    """llama.cpp's src/ and include/ in dest, patched (but for those named in skip): from the pinned sdist
    (its folder pin["llama_subdir"]) or from the llama.cpp checkout PYGGML_LLAMA_SOURCE names."""
    skip = skip & {p.name for p in patches(patch_dir=LLAMA_PATCH_DIR)}
    pin = tomllib.loads(PIN_FILE.read_text())
    source = os.environ.get("PYGGML_LLAMA_SOURCE") or None
    choice = choice or choice_from_env()

    def fill() -> None:
        if source:
            _copy_checkout(source, "llama.h", LLAMA_FOLDERS, dest, "PYGGML_LLAMA_SOURCE")
        else:
            extract_folders(cached_sdist(pin), {f"{pin['llama_subdir']}/{f}": dest / f for f in LLAMA_FOLDERS})

    want = stamp_text(pin, source, skip, LLAMA_PATCH_DIR, LLAMA_FOLDERS, f"{choice.text}/{_user_tree()}")
    return _prepared(dest, want, fill, skip, LLAMA_PATCH_DIR, "llama.cpp", choice)


def ggml_version(tree: Path) -> str:
    """ggml's version as its CMakeLists.txt sets it (GGML_VERSION_MAJOR/MINOR/PATCH), "" if it does not."""
    text = (tree / "CMakeLists.txt").read_text(errors="replace") if (tree / "CMakeLists.txt").exists() else ""
    parts = [re.search(rf"set\(GGML_VERSION_{k}\s+(\d+)\)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else ""  # type: ignore[union-attr]


def llama_tokenizers(tree: Path) -> list[str]:
    """The tokenizer models this llama.cpp reads (`tokenizer.ggml.model`), as its src/llama-vocab.cpp names them:
    make-model writes llama.cpp's test tokenizer where the tree has it."""
    vocab = tree / "src" / "llama-vocab.cpp"
    text = vocab.read_text(errors="replace") if vocab.exists() else ""
    return sorted(set(re.findall(r'tokenizer_model == "(\w+)"', text)))


def tree_record(
    ggml: list[dict], llama: list[dict] | None, ggml_dest: Path, choice: PatchChoice, llama_dest: Path | None = None
) -> dict:
    """What the build is made of, for _build_info.json: the tree (the pin, or the user's folders), ggml's
    version, the patch choice and each patch's state."""
    pin = tomllib.loads(PIN_FILE.read_text())
    ggml_source = os.environ.get("PYGGML_GGML_SOURCE") or None
    llama_source = os.environ.get("PYGGML_LLAMA_SOURCE") or None
    return {
        "tree": "user" if ggml_source or llama_source else "pin",
        "pin": {k: pin[k] for k in ("package", "version", "sha256")},
        "ggml_source": str(ggml_root(ggml_source)) if ggml_source else None,
        "llama_source": llama_source,
        "ggml_version": ggml_version(ggml_dest),
        "llama_tokenizers": llama_tokenizers(llama_dest) if llama_dest else [],
        "patch_choice": choice.text or ("none (a user's tree)" if _user_tree() else "all (the pin)"),
        "strict": choice.strict,
        "patches": ggml + (llama or []),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", required=True, type=Path, help="folder to write the patched ggml tree to")
    parser.add_argument(
        "--skip",
        default="",
        help="ggml or llama.cpp patches to leave out, comma-separated file names (for tests that show what a patch fixes)",
    )
    parser.add_argument("--llama-dest", type=Path, help="also write llama.cpp's patched src/ and include/ here")
    parser.add_argument("--record", type=Path, help="write what the tree is made of here (JSON)")
    args = parser.parse_args()
    try:
        skip = frozenset(n for n in args.skip.split(",") if n)
        check_skip(skip)
        choice = choice_from_env()
        ggml = prepare(args.dest, skip, choice)
        llama = prepare_llama(args.llama_dest, skip, choice) if args.llama_dest else None
        if args.record:
            text = json.dumps(tree_record(ggml, llama, args.dest, choice, args.llama_dest), indent=1) + "\n"
            # written only when it changes: the C layer is generated again (and compiled) when it does
            if not args.record.exists() or args.record.read_text() != text:
                args.record.write_text(text)
    except FetchError as e:
        print(f"pyggml: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
