"""Give a built wheel a local version and extra requirements: the CUDA wheel's metadata.

    python tools/retag_wheel.py WHEEL --local cu130 --requires "nvidia-cublas>=13.0,<14" --out DIR

`pip wheel .` names every pyggml wheel `pyggml-0.1.0-...whl`, whatever its backends. The CUDA wheel
(scripts/build_cuda_wheel.sh) is rewritten as `pyggml-0.1.0+cu130-...whl`: the local version says which
CUDA it was built with (`pip show pyggml`, the file name), and it requires the pip package that holds
the cuBLAS it links at run time. Only the metadata changes: the dist-info folder is renamed, METADATA gets
the new version and requirements, RECORD new hashes; every other file is copied as it is.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import re
import sys
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def retag(wheel: Path, out_dir: Path, local: str, requires: list[str]) -> Path:
    """Write a copy of `wheel` into `out_dir` with version `VERSION+local` and `requires` added."""
    if not re.fullmatch(r"[a-zA-Z0-9]+(\.[a-zA-Z0-9]+)*", local):
        raise ValueError(f"not a local version label: {local!r}")
    name, version, rest = wheel.name.split("-", 2)
    if "+" in version:
        raise ValueError(f"{wheel.name} already has a local version")
    new_version = f"{version}+{local}"
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{new_version}.dist-info/"
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{name}-{new_version}-{rest}"
    records: list[str] = []
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as dst:
        names = src.namelist()
        if f"{old_info}METADATA" not in names:
            raise ValueError(f"{wheel.name} has no {old_info}METADATA")
        for item in src.infolist():
            path = item.filename
            if path == f"{old_info}RECORD":
                continue
            data = src.read(item)
            if path.startswith(old_info):
                path = new_info + path[len(old_info) :]
            if path == f"{new_info}METADATA":
                data = _metadata(data.decode("utf-8"), new_version, requires).encode("utf-8")
            info = zipfile.ZipInfo(path, date_time=item.date_time)
            info.external_attr = item.external_attr
            info.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(info, data)
            records.append(f"{path},{_record_hash(data)},{len(data)}")
        records.append(f"{new_info}RECORD,,")
        dst.writestr(f"{new_info}RECORD", "\n".join(records) + "\n")
    return target


def _metadata(text: str, version: str, requires: list[str]) -> str:
    head, sep, body = text.partition("\n\n")  # headers, then the description
    lines = head.split("\n")
    lines = [f"Version: {version}" if line.startswith("Version: ") else line for line in lines]
    last_requirement = max((i for i, line in enumerate(lines) if line.startswith("Requires-Dist: ")), default=None)
    new = [f"Requires-Dist: {r}" for r in requires]
    if last_requirement is None:
        lines.extend(new)
    else:
        lines[last_requirement + 1 : last_requirement + 1] = new
    return "\n".join(lines) + sep + body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--local", required=True, help="local version label (e.g. cu130)")
    parser.add_argument("--requires", action="append", default=[], help="requirement to add (repeatable)")
    parser.add_argument("--out", type=Path, required=True, help="folder to write the new wheel to")
    args = parser.parse_args(argv)
    print(retag(args.wheel, args.out, args.local, args.requires))
    return 0


if __name__ == "__main__":
    sys.exit(main())
