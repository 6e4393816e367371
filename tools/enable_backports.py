"""Add this Debian release's backports suite to apt, from the mirror apt already uses.

Why: Debian 12's lavapipe (Mesa 22.3) corrupts the heap when Vulkan buffers are freed
between graphs (a process that runs many graphs aborts with "corrupted double-linked
list"; ASan finds nothing in ggml, and Mesa 25 from bookworm-backports runs the same
graphs cleanly). CI takes mesa-vulkan-drivers from backports. The mirror is read from
apt's own configuration, so no host is written here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

SOURCES = Path("/etc/apt/sources.list.d")
TARGET = SOURCES / "pyggml-backports.sources"


def codename() -> str:
    text = Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=(\S+)", text, re.M)
    if not m:
        raise SystemExit("enable_backports: no VERSION_CODENAME in /etc/os-release")
    return m.group(1).strip('"')


def release_stanza(name: str) -> dict[str, str] | None:
    """The deb822 stanza (or one-line entry) that serves the release itself."""
    for path in sorted(SOURCES.glob("*.sources")):
        for block in path.read_text().split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", block, re.M))
            if name in fields.get("Suites", "").split():
                return fields
    for path in [Path("/etc/apt/sources.list"), *sorted(SOURCES.glob("*.list"))]:
        if path.exists():
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) >= 4 and parts[0] == "deb" and parts[2] == name:
                    return {"Types": "deb", "URIs": parts[1], "Components": " ".join(parts[3:])}
    return None


def main() -> int:
    name = codename()
    stanza = release_stanza(name)
    if stanza is None:
        print(f"enable_backports: no apt source for {name} found", file=sys.stderr)
        return 1
    lines = [
        f"Types: {stanza.get('Types', 'deb')}",
        f"URIs: {stanza['URIs']}",
        f"Suites: {name}-backports",
        f"Components: {stanza.get('Components', 'main')}",
    ]
    if "Signed-By" in stanza:
        lines.append(f"Signed-By: {stanza['Signed-By']}")
    TARGET.write_text("\n".join(lines) + "\n")
    print(f"enable_backports: {name}-backports added ({TARGET})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
