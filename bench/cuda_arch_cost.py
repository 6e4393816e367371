"""What each CUDA architecture adds to the build: a sample of ggml-cuda's files compiled for several sets.

    python bench/cuda_arch_cost.py [--build build/cuda/build] [--arch 90 --arch "75;80;86;89;90"]
                                   [--files mmq-instance-q4_0.cu,...]

Takes the nvcc command of each sample file from the CUDA build's compile_commands.json (a build of
scripts/build_cuda_wheel.sh), swaps its --generate-code options for each architecture set, compiles it
into a temporary folder and measures the CPU time (user + system of nvcc and everything it runs: cicc,
ptxas, the host compiler), which depends little on what else the machine runs. The sample is the heaviest
kinds of file (matrix-multiplication and flash-attention template instances) and two ordinary ones; the
ratio of a set's time to the first set's, applied to the whole build's CPU time (build-times.txt),
estimates that set's build. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = (
    "mmq-instance-q4_0.cu",
    "mmq-instance-q6_k.cu",
    "fattn-mma-f16-instance-ncols1_16-ncols2_4.cu",
    "fattn-tile-instance-dkq128-dv128.cu",
    "mmvq.cu",
    "binbcast.cu",
)


def gencode(archs: str) -> list[str]:
    """nvcc's options for a CMAKE_CUDA_ARCHITECTURES list: NN (SASS and PTX), NN-real, NN-virtual."""
    out = []
    for a in archs.split(";"):
        num = re.match(r"\d+[a-z]?", a)
        assert num, a
        n = num.group(0)
        codes = {"real": f"sm_{n}", "virtual": f"compute_{n}"}.get(a.partition("-")[2], f"compute_{n},sm_{n}")
        out.append(f"--generate-code=arch=compute_{n},code=[{codes}]")
    return out


def cpu_time(cmd: list[str], cwd: str) -> tuple[float, float]:
    """(CPU seconds of the command and its children, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", type=Path, default=ROOT / "build" / "cuda" / "build")
    p.add_argument("--arch", action="append", help='architecture set (repeatable; default "90" and "75;80;86;89;90")')
    p.add_argument("--files", help="comma-separated file names (default: the sample above)")
    args = p.parse_args()
    sets = args.arch or ["90", "75;80;86;89;90"]
    files = args.files.split(",") if args.files else list(SAMPLE)
    commands = {Path(c["file"]).name: c for c in json.loads((args.build / "compile_commands.json").read_text())}
    print(f"# sample: {', '.join(files)}")
    print("# each cell: CPU seconds (user + sys of nvcc and its children), object size in MB")
    print("| file | " + " | ".join(f"{s}" for s in sets) + " |")
    print("|---" * (len(sets) + 1) + "|")
    totals = [0.0] * len(sets)
    sizes = [0] * len(sets)
    with tempfile.TemporaryDirectory() as tmp:
        for name in files:
            entry = commands[name]
            base = [a for a in shlex.split(entry["command"]) if not a.startswith("--generate-code=")]
            out = base.index("-o")
            row = []
            for i, archs in enumerate(sets):
                obj = Path(tmp) / f"{name}.{i}.o"
                cpu, _ = cpu_time(base[:out] + gencode(archs) + ["-o", str(obj)] + base[out + 2 :], entry["directory"])
                totals[i] += cpu
                sizes[i] += obj.stat().st_size
                row.append(f"{cpu:.0f} s, {obj.stat().st_size / 1e6:.1f} MB")
            print(f"| {name} | " + " | ".join(row) + " |", flush=True)
    print(
        "| total | "
        + " | ".join(
            f"{t:.0f} s ({t / totals[0]:.2f}x), {n / 1e6:.1f} MB ({n / sizes[0]:.2f}x)" for t, n in zip(totals, sizes)
        )
        + " |"
    )


if __name__ == "__main__":
    main()
