"""pyggml's command line: `info` (what this build has), `check` (the differential suite), `coverage`,
`rpc-server` (serve a local device to other processes over ggml's RPC backend) and `gguf` (summarize a GGUF file)."""

from __future__ import annotations

import argparse
import json
import logging
import sys


def info(args) -> int:
    from pyggml import build_info, devices
    data: dict = {"build": build_info(), "devices": []}
    for d in devices():
        free, total = d.memory()
        data["devices"].append({"name": d.name, "description": d.description, "type": d.type.name,
                                "backend": d.backend_name, "memory_free": free, "memory_total": total})
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    print("backends built:", ", ".join(data["build"]["backends"]))
    print("devices:")
    for d in data["devices"]:
        mem = f", {d['memory_total'] / 2**30:.1f} GiB" if d["memory_total"] else ""
        print(f"  {d['name'].lower():<10} {d['type']:<5} {d['description']}{mem}")
    if "vulkan" in data["build"]["backends"]:
        print("note: ggml lists CPU-type Vulkan devices (Mesa's lavapipe) only when GGML_VK_VISIBLE_DEVICES "
              "names them, e.g. GGML_VK_VISIBLE_DEVICES=0 (or 0,0 for the same device twice)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pyggml", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="show ggml's log")
    sub = parser.add_subparsers(dest="command", required=True)
    p_info = sub.add_parser("info", help="list the built backends and their devices")
    p_info.add_argument("--json", action="store_true", help="print JSON")
    p_check = sub.add_parser("check", help="run every case on every backend against its NumPy oracle")
    p_check.add_argument("--backend", action="append", metavar="NAME",
                         help="backend to run on (cpu, vulkan0, ...; repeatable; default: all available)")
    p_check.add_argument("--only", metavar="PATTERN", help="cases whose name contains PATTERN (or matches it as a regex)")
    p_check.add_argument("--json", metavar="FILE", help="write the records (case, backend, status, error, ...) here")
    p_check.add_argument("--junit", metavar="FILE", help="write JUnit XML here (a testsuite per backend, a testcase per case)")
    p_check.add_argument("--op", action="append", metavar="OP", help="cases of this op (repeatable)")
    p_check.add_argument("--type", action="append", metavar="TYPE", help="cases involving this ggml type (repeatable)")
    p_check.add_argument("--list", action="store_true", help="list the selected cases (name, op, types) and stop")
    p_check.add_argument("--slow", action="store_true",
                         help="also run the cases lavapipe needs minutes to compile shaders for (see docs/findings.md)")
    p_check.add_argument("--mode", choices=("test", "grad"), default="test",
                         help="test: outputs against the oracles; grad: gradients against finite differences")
    p_check.add_argument("-q", "--quiet", action="store_true", help="no progress")
    p_cov = sub.add_parser("coverage", help="for every ggml op kind: wrapper, cases, and their results per backend")
    p_cov.add_argument("--backend", action="append", metavar="NAME", help="backends to run on (default: all available)")
    p_cov.add_argument("--json", action="store_true", help="print JSON")
    p_rpc = sub.add_parser("rpc-server", help="serve one local device over ggml's RPC backend (TCP)")
    p_rpc.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1; anything else is reachable from the network: "
                            "ggml's RPC server is not secure)")
    p_rpc.add_argument("--port", type=int, default=50052, help="port (default 50052)")
    p_rpc.add_argument("--device", default="cpu", help="the device to serve: cpu, vulkan0, ... (default cpu)")
    p_rpc.add_argument("--threads", type=int, default=None, help="CPU threads (default: the machine's cores)")
    p_gguf = sub.add_parser("gguf", help="summarize a GGUF file: header, metadata, tensors (read by ggml's gguf)")
    p_gguf.add_argument("file", help="the GGUF file")
    p_gguf.add_argument("--json", action="store_true", help="print JSON (metadata values in full)")
    p_gguf.set_defaults(vk_devices="0")  # no device is used
    for sub_parser in (p_info, p_check, p_cov):
        sub_parser.add_argument("--rpc", metavar="HOST:PORT[,HOST:PORT...]",
                                help="add these RPC servers' devices first (rpc0, rpc1, ... in this order)")
    for sub_parser in (p_info, p_check, p_cov, p_rpc):
        sub_parser.add_argument("--vk-devices", metavar="LIST", default="0",
                                help="GGML_VK_VISIBLE_DEVICES when it is not set (default 0): ggml lists CPU-type "
                                     "Vulkan devices such as lavapipe only when named; 0,0 shows device 0 twice")
    args = parser.parse_args(argv)
    from pyggml.backend import enable_cpu_vulkan_devices
    enable_cpu_vulkan_devices(args.vk_devices)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
    if args.command == "rpc-server":
        from pyggml import rpc
        if not 0 < args.port < 65536 or (args.threads is not None and args.threads < 1):
            print("rpc-server: --port must be in 1..65535 and --threads at least 1", file=sys.stderr)
            return 2
        try:
            return rpc.serve(args.host, args.port, args.device, args.threads)
        except ValueError as e:
            print(f"rpc-server: {e}", file=sys.stderr)
            return 2
    if getattr(args, "rpc", None):
        from pyggml import rpc
        try:
            rpc.add_servers(args.rpc)
        except (rpc.RpcError, ValueError, RuntimeError) as e:
            print(f"{args.command}: --rpc {args.rpc}: {e}", file=sys.stderr)
            return 2
    if args.command == "gguf":
        from pyggml import gguf
        return gguf.main(args)
    if args.command == "info":
        return info(args)
    if args.command == "coverage":
        from pyggml.testing import coverage
        return coverage.main(args)
    from pyggml.testing import check
    return check.main(args)


if __name__ == "__main__":
    sys.exit(main())
