#!/usr/bin/env python3
"""Lists the workspace's Rust files over 800 lines, structs over 15 fields and functions over 150
lines: the sizes at which the developers' guide asks whether a room does two jobs. A hint for a
reader, not a rule: a room that does one job may be longer, and one that does two is split by
job, never by line count (packing code or fields to get under a number is what this must not
cause, so nothing fails on it and no test runs it). Usage: tests/house-limits.py [ROOT]

Counts lines as `wc -l` does. A struct's fields are the `name: Type` lines directly inside its
braces (tuple structs and enums are not counted); a function runs from its `fn` line to the
closing brace at the same indentation. Test modules (`#[cfg(test)]` to the end of the file)
count toward the file's length but their functions are not checked. A rough reading of the
source, not a parser: good enough for code that `cargo fmt` laid out."""
import os
import re
import sys

MAX_FILE, MAX_FIELDS, MAX_FN = 800, 15, 150
root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
excess = []
for top in ("agent/src", "profiler/src", "shim/src", "tests/src"):
    for directory, _, files in os.walk(os.path.join(root, top)):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            rel = os.path.relpath(path, root)
            lines = open(path, encoding="utf-8").read().split("\n")[:-1]
            if len(lines) > MAX_FILE:
                excess.append(f"{rel}: {len(lines)} lines (hint {MAX_FILE})")
            tests_from = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
            for i, line in enumerate(lines[:tests_from]):
                indent = len(line) - len(line.lstrip())
                struct = re.match(r"\s*(pub(\([a-z]+\))? )?struct (\w+)[^;(]*\{\s*$", line)
                if struct:
                    fields, j = 0, i + 1
                    while j < len(lines) and not re.match(r"\s{%d}\}" % indent, lines[j]):
                        if re.match(r"\s{%d}(pub(\([a-z]+\))? )?\w+: " % (indent + 4), lines[j]):
                            fields += 1
                        j += 1
                    if fields > MAX_FIELDS:
                        excess.append(f"{rel}:{i + 1}: struct {struct.group(3)} has {fields} fields (hint {MAX_FIELDS})")
                function = re.match(r"\s*(pub(\([a-z]+\))? )?(const )?(unsafe )?(extern \"C(-unwind)?\" )?fn (\w+)", line)
                if function and not line.rstrip().endswith(";"):
                    j = i + 1
                    while j < len(lines) and not re.match(r"\s{%d}\}" % indent, lines[j]):
                        j += 1
                    length = j - i + 1
                    if length > MAX_FN:
                        excess.append(f"{rel}:{i + 1}: fn {function.group(7)} is {length} lines (hint {MAX_FN})")
for line in excess:
    print(line)
print(f"{len(excess)} past the sizes that ask whether a room does two jobs" if excess else "nothing past those sizes")
