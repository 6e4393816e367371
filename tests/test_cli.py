"""The command line refuses bad arguments with one clear line, never a traceback."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest


def run(*args):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, timeout=600)


def test_check_only_with_a_pattern_that_is_not_a_regex():
    res = run("pyggml", "check", "--only", "[", "--backend", "cpu", "-q")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2 and "no case matches '['" in res.stderr


def test_check_json_path_unwritable_is_found_before_the_run(tmp_path):
    res = run("pyggml", "check", "--backend", "cpu", "--json", str(tmp_path / "no" / "such" / "dir.json"), "-q")
    assert "Traceback" not in res.stderr
    assert res.returncode == 2 and "cannot write the JSON report" in res.stderr
    assert "pass:" not in res.stdout  # refused before running


def test_meta_fuzz_refuses_a_negative_seed():
    res = run("pyggml", "meta-fuzz", "--seed", "-1")
    assert "Traceback" not in res.stderr and res.returncode == 2 and "must be >= 0" in res.stderr


def test_meta_fuzz_counts_only_ggml_refusals_as_unsplittable():
    from pyggml.testing.fuzzers import meta_fuzz

    res = run("pyggml", "meta-fuzz", "--trials", "6", "--seed", "3")
    assert "Traceback" not in res.stderr
    # a trial whose child fails for any other reason is a failure
    record = meta_fuzz.run_in_child(
        {"seed": 0, "K": 4, "M": 4, "P": 4, "N": 4, "steps": [{"op": "nonsense"}]}, "cpu,cpu"
    )
    assert record["status"] == "fail"


# --- issue 19's papercuts: every refusal says what to do, before any case runs ------------------------------------
def _not_built() -> tuple[str, str]:
    """A backend this build lacks and the CMake option that builds it."""
    from pyggml import build_info

    built = build_info()["backends"]
    return next(
        (f, opt)
        for f, opt in (("vulkan", "GGML_VULKAN"), ("cuda", "GGML_CUDA"), ("sycl", "GGML_SYCL"))
        if f not in built
    )


def test_check_unknown_op_names_the_closest_and_every_valid_op():
    res = run("pyggml", "check", "--op", "matmul", "--backend", "cpu")
    assert res.returncode == 2 and "Traceback" not in res.stderr and res.stdout == ""
    assert "did you mean mul_mat" in res.stderr and "ops with cases" in res.stderr and "soft_max" in res.stderr
    assert "None" not in res.stderr


def test_check_unknown_type_names_the_types_it_begins():
    res = run("pyggml", "check", "--type", "q4", "--list")
    assert res.returncode == 2 and res.stdout == ""
    assert "did you mean q4_0, q4_1, q4_K" in res.stderr and "types with cases" in res.stderr


def test_check_filters_that_select_nothing_together_say_so():
    res = run("pyggml", "check", "--only", "^add/", "--type", "q4_0")
    assert res.returncode == 2 and "no case matches --only ^add/ --type q4_0" in res.stderr


def test_check_a_backend_this_build_lacks_says_how_to_build_it():
    family, option = _not_built()
    res = run("pyggml", "check", "--backend", f"{family}0", "--op", "add")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f'CMAKE_ARGS="-D{option}=ON" pip install -e .' in res.stderr and "backends: cpu" in res.stderr
    assert "GGML_VK_VISIBLE_DEVICES" not in res.stderr  # a hint about a backend that is not there misleads
    assert res.stdout == ""  # refused before any case ran: no table, no "error: 1"
    res = run("pyggml", "check", "--backend", f"meta:cpu,{family}0", "--op", "add")
    assert res.returncode == 2 and option in res.stderr and res.stdout == ""
    res = run("pyggml", "check", "--backend", "cpux", "--op", "add")
    assert res.returncode == 2 and "did you mean cpu" in res.stderr and "meta:cpu,cpu" in res.stderr


def test_check_grad_mode_refuses_filters_it_cannot_apply():
    res = run("pyggml", "check", "--mode", "grad", "--op", "add")
    assert res.returncode == 2 and "--only" in res.stderr


def test_check_quiet_prints_only_the_counts_and_failures():
    res = run("pyggml", "check", "--backend", "cpu", "--op", "add", "-q")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert not any(line.startswith("add/") for line in lines) and len(lines) <= 5, res.stdout
    assert lines[0].split()[:3] == ["backend", "pass", "known"] and lines[1].split()[:2] == ["cpu", "17"]
    assert lines[-1].startswith("pass: 17") and res.stderr == ""


def test_check_json_dash_writes_the_report_to_stdout(tmp_path):
    res = subprocess.run(
        [sys.executable, "-m", "pyggml", "check", "--backend", "cpu", "--op", "add", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    records = json.loads(res.stdout)  # nothing else on stdout
    assert len(records) == 17 and {r["status"] for r in records} == {"pass"}
    assert not (tmp_path / "-").exists() and "pass: 17" in res.stderr  # the table went to stderr
    res = run("pyggml", "check", "--backend", "cpu", "--op", "add", "--junit", "-", "-q")
    assert res.returncode == 0 and res.stdout.startswith("<?xml") and "<testsuite " in res.stdout
    res = run("pyggml", "check", "--json", "-", "--junit", "-")
    assert res.returncode == 2 and "only one report" in res.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly():
    for args in (["check", "--list"], ["info", "--json"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "pyggml", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()  # `| head -1`
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=600) in (0, 141) and "Traceback" not in err and "BrokenPipe" not in err, err


def test_the_cross_backend_legend_shows_with_several_backends_only():
    one = run("pyggml", "check", "--backend", "cpu", "--only", "^add/f32$")
    assert one.returncode == 0 and "NMSE vs the NumPy oracle" in one.stdout and "x = " not in one.stdout
    two = run("pyggml", "check", "--backend", "cpu", "--backend", "meta:cpu,cpu", "--only", "^add/f32$")
    assert two.returncode == 0, two.stdout + two.stderr
    assert "x = largest NMSE vs the first backend (cpu)" in two.stdout


def test_coverage_reads_a_check_report_instead_of_running(tmp_path):
    report = tmp_path / "r.json"
    assert run("pyggml", "check", "--backend", "cpu", "--op", "add", "--json", str(report), "-q").returncode == 0
    res = run("pyggml", "coverage", "--from", str(report), "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["kind"]: r for r in json.loads(res.stdout)["rows"]}
    assert rows["ADD"]["cases"] >= 1 and rows["ADD"]["backends"]["cpu"]["pass"] >= 1 and rows["MUL_MAT"]["cases"] == 0
    assert "holds 17 of the" in res.stderr  # a filtered report is said to be one
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    for args in (
        ["--from", str(bad)],
        ["--from", str(tmp_path / "none.json")],
        ["--from", str(report), "--backend", "x"],
    ):
        res = run("pyggml", "coverage", *args)
        assert res.returncode == 2 and "Traceback" not in res.stderr and "coverage:" in res.stderr


def test_coverage_refuses_a_backend_before_running_the_suite():
    family, option = _not_built()
    res = run("pyggml", "coverage", "--backend", f"{family}0")
    assert res.returncode == 2 and option in res.stderr and "running the whole suite" not in res.stderr


def test_info_shows_ggml_version_pin_patches_and_cpu_features():
    res = run("pyggml", "info")
    assert res.returncode == 0, res.stderr
    from pyggml import lib
    from pyggml._native import cstr

    assert f"ggml {cstr(lib.ggml_version())}" in res.stdout and "ggml-cpu built with:" in res.stdout
    assert "pin: llama-cpp-python==" in res.stdout and "sha256" in res.stdout  # a source checkout has the pin
    assert "0001-meta-split-permuted-view" in res.stdout
    data = json.loads(run("pyggml", "info", "--json").stdout)["ggml"]
    assert data["version"] and data["pin"]["sha256"] and data["patches"]
    assert set(data["cpu_features"]) == {f for f in data["cpu_features"] if getattr(lib, f"ggml_cpu_has_{f}")()}
    if bool(lib.ggml_cpu_has_avx2()):
        assert "avx2" in data["cpu_features"] and "AVX2" in res.stdout


def test_info_names_the_cpus_extra_buffer_types():
    """Where llama.cpp keeps weights of its own layout unless --no-repack (AMX's products died there before ggml
    patch 0037, docs/findings.md 37): the names ggml's CPU lists, in the text and the JSON."""
    from pyggml.transport import extra_buffer_types

    names = sorted(set(extra_buffer_types().values()))
    res = run("pyggml", "info")
    assert res.returncode == 0, res.stderr
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("CPU extra buffer types"))
    assert line.endswith(": " + (", ".join(names) or "none")), line
    assert json.loads(run("pyggml", "info", "--json").stdout)["cpu_extra_buffer_types"] == names


def test_the_fuzzers_are_subcommands_with_their_options():
    res = run("pyggml", "--help")
    assert res.returncode == 0 and all(name in res.stdout for name in ("fuzz", "meta-fuzz", "gguf-fuzz", "rpc-fuzz"))
    for name, option in (
        ("notebooks", "--refresh"),
        ("fuzz", "--calls"),
        ("meta-fuzz", "--trials"),
        ("gguf-fuzz", "--files"),
        ("rpc-fuzz", "--messages"),
        ("rpc-fuzz", "--graphs"),
    ):
        res = run("pyggml", name, "--help")
        assert res.returncode == 0 and option in res.stdout and f"pyggml {name}" in res.stdout, res.stderr


def _children(pid: int) -> set[int]:
    """The processes whose parent is `pid` (Linux: /proc/PID/stat's fourth field)."""
    from pathlib import Path

    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def test_sigterm_ends_check_and_the_children_it_started(tmp_path):
    """A CI timeout or `kill` sends SIGTERM: check --model's model child went on computing, orphaned, for a
    minute. Now SIGTERM ends check as Ctrl-C does, and its children with it."""
    import os
    import signal
    import time

    import pytest

    if not os.path.isdir("/proc"):
        pytest.skip("finds the children through /proc (Linux)")
    model = tmp_path / "q.gguf"
    made = subprocess.run([sys.executable, "-m", "pyggml", "make-model", "qwen35", str(model)], capture_output=True)
    assert made.returncode == 0, made.stderr[-2000:]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyggml", "check", "--model", str(model), "--backend", "cpu", "--tokens", "2048"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline, kids = time.monotonic() + 60, set()
    while not kids and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        kids = _children(proc.pid)
    assert kids, "check started no child within a minute"
    time.sleep(0.5)  # the child is computing
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    time.sleep(0.5)
    alive = {k for k in kids if os.path.exists(f"/proc/{k}") and "Z" not in open(f"/proc/{k}/stat").read().split()[2]}
    assert not alive, f"children of check still running after SIGTERM: {alive}"


def test_version_names_pyggml_and_ggml():
    out = subprocess.run([sys.executable, "-m", "pyggml", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("pyggml ") and ", ggml " in out.stdout


@pytest.mark.parametrize(
    "command",
    ["info", "check", "compare", "coverage", "findings", "rpc-server", "gguf", "make-model", "quantize", "notebooks"],
)
def test_every_commands_help_has_a_description_examples_and_exit_codes(command):
    from pyggml.__main__ import _parser

    parser, _ = _parser([command])  # in this process: no interpreter started per command
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    text = sub.format_help()
    usage, _, rest = text.partition("\n\n")
    assert rest.split("\n\n")[0].strip(), "no description"
    assert f"examples:\n  python -m pyggml {command}" in text and "exit status: 0 " in text, text
    assert "2 bad input" in text


def test_no_function_of_the_command_line_module_is_over_60_lines():
    # `_main` was one function of 386 lines: every command's options and its dispatch (check's in its own module)
    import ast
    from pathlib import Path

    import pyggml.__main__ as cli

    tree = ast.parse(Path(cli.__file__).read_text())
    long = [(f.name, f.end_lineno - f.lineno + 1) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)]
    assert max(n for _, n in long) <= 60, sorted(long, key=lambda x: -x[1])[:3]


def test_a_cpu_variant_ggml_has_not_is_refused_listing_those_built():
    from pyggml import cpu_variants

    out = run("pyggml", "check", "--backend", "cpu:nehalem", "--op", "add")
    assert out.returncode == 2 and "Traceback" not in out.stderr and "cpu:nehalem" in out.stderr
    if cpu_variants.built():
        assert "not one of the CPU variants built: " + ", ".join(cpu_variants.built()) in out.stderr
    else:
        assert "this build has no CPU variants" in out.stderr and "PYGGML_CPU_VARIANTS" in out.stderr


# --- issue 59: a backend or device name is bad input wherever it is taken apart ------------------------------------
@pytest.mark.parametrize(
    ("args", "option", "name"),
    [
        (["check", "--backend", "meta:", "--op", "add"], "--backend", "meta:"),
        (["check", "--backend", "meta:meta:cpu", "--op", "add"], "--backend", "meta:meta:cpu"),
        (["check", "--backend", "", "--op", "add"], "--backend", "empty"),
        (["compare", "m.gguf", "--backend", "meta:", "--backend", "cpu"], "--backend", "meta:"),
        (["coverage", "--backend", "meta:"], "--backend", "meta:"),
        (["findings", "--backend", "meta:"], "--backend", "meta:"),
        (["script-fuzz", "--backend", "meta:"], "--backend", "meta:"),
        (["gguf-fuzz", "--backend", "meta:"], "--backend", "meta:"),
        (["meta-fuzz", "--devices", ","], "--devices", "','"),
        (["meta-fuzz", "--devices", "meta:cpu,cpu"], "--devices", "meta:cpu,cpu"),
        (["rpc-server", "--device", "meta:"], "--device", "meta:"),
    ],
)
def test_a_name_that_is_no_backends_is_a_usage_error(args, option, name):
    res = run("pyggml", *args)
    assert "Traceback" not in res.stderr and res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert "error: argument " + option in last and name in last and "cpu" in last, last


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["meta-fuzz", "--devices", "nonsense", "--trials", "1", "--layouts", "0"], "--devices"),
        (["meta-fuzz", "--devices", "cpu,nonsense", "--trials", "1", "--layouts", "0"], "--devices"),
        (["script-fuzz", "--backend", "nonsense", "--programs", "1"], "--backend"),
        (["gguf-fuzz", "--backend", "nonsense", "--files", "1"], "--backend"),
    ],
)
def test_a_fuzzer_refuses_a_backend_this_build_lacks_instead_of_failing_each_trial(args, option):
    res = run("pyggml", *args)
    assert "Traceback" not in res.stderr and res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert f"error: {option} " in last and "no backend 'nonsense'" in last and "its devices: " in last, last
    assert "fail" not in res.stdout and "pass:" not in res.stdout
