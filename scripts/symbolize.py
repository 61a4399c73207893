#!/usr/bin/env python3
"""Names the return addresses of a WEFT_STACKS dump (host/src/stacks.rs) printed by a process on another machine.

    scripts/symbolize.py LOG [--lib DIR]...

LOG holds the dump ("weft stacks: ..." lines, as scripts/hang-dump.sh collects them). Each address is mapped to its
file through the dump's own mappings; files are looked up here by name: a packed binary `.gpu/bin/<kind>-<name>` is
the unstripped release build of the same source (`cargo test --release --no-run` and `cargo build --release
--examples --benches` name them, as the packing tool does), and a shared library is looked for in every `--lib` DIR
(e.g. an unpacked NCCL release's lib/). Names come from the symbol tables (`nm`), so a stripped library gives its
exported functions only: for libcuda, the driver API call a thread is in. Files not found here print as file+offset.
"""
import bisect
import json
import os
import re
import subprocess
import sys


def cargo_executables():
    found = {}
    for cmd in (
        ["cargo", "test", "--workspace", "--release", "--no-run", "--message-format=json"],
        ["cargo", "build", "--workspace", "--release", "--examples", "--benches", "--message-format=json"],
    ):
        out = subprocess.run(cmd, capture_output=True, text=True).stdout
        for line in out.splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            if m.get("reason") == "compiler-artifact" and m.get("executable"):
                t = m["target"]
                kind = "test" if m["profile"]["test"] else t["kind"][0]
                found[f"{kind}-{t['name']}"] = m["executable"]
    return found


class Symbols:
    def __init__(self, path):
        self.addrs, self.names = [], []
        for flags in (["-C", "--defined-only"], ["-C", "-D", "--defined-only"]):
            out = subprocess.run(["nm", *flags, path], capture_output=True, text=True).stdout
            rows = []
            for line in out.splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[1] in "TtWw":
                    rows.append((int(parts[0], 16), parts[2]))
            if rows:
                rows.sort()
                self.addrs = [a for a, _ in rows]
                self.names = [n for _, n in rows]
                break

    def name(self, vaddr):
        i = bisect.bisect_right(self.addrs, vaddr) - 1
        if i < 0:
            return None
        return f"{self.names[i]}+{vaddr - self.addrs[i]:#x}"


def main():
    args = sys.argv[1:]
    libs = []
    while "--lib" in args:
        i = args.index("--lib")
        libs.append(args[i + 1])
        del args[i : i + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    text = open(args[0], errors="replace").read().splitlines()
    maps = []  # (start, end, offset, path)
    for line in text:
        m = re.match(r"\s*map ([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \d+\s+(\S+)", line)
        if m:
            maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(3), 16), m.group(4)))
    # The load bias of each file: where its offset-0 mapping starts (its first PT_LOAD has vaddr 0 and offset 0).
    bias = {}
    for start, _, offset, path in sorted(maps):
        if offset == 0:
            bias.setdefault(path, start)
    executables = None
    symbols = {}

    def local_file(path):
        nonlocal executables
        base = os.path.basename(path)
        if "/.gpu/bin/" in path:
            if executables is None:
                executables = cargo_executables()
            return executables.get(base)
        for d in libs:
            candidate = os.path.join(d, base)
            if os.path.exists(candidate):
                return candidate
        return None

    for line in text:
        m = re.match(r"(\s*)at 0x([0-9a-f]+)", line)
        if not m:
            if not re.match(r"\s*map ", line):
                print(line)
            continue
        ip = int(m.group(2), 16)
        hit = next(((s, o, p) for s, e, o, p in maps if s <= ip < e), None)
        if hit is None or hit[2] not in bias:
            print(f"{m.group(1)}at {ip:#x}")
            continue
        path = hit[2]
        vaddr = ip - bias[path]
        where = local_file(path)
        name = None
        if where:
            if where not in symbols:
                symbols[where] = Symbols(where)
            name = symbols[where].name(vaddr - 1)
        print(f"{m.group(1)}{os.path.basename(path)}+{vaddr:#x}  {name or ''}")


if __name__ == "__main__":
    main()
