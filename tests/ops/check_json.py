#!/usr/bin/env python3
"""check_json.py DOC COMMAND < output

Parses metaroce-ctl -j output (stdin) and checks that it is a JSON array
whose every element has the fields docs/operations.md §JSON documents for
COMMAND (the start of the table's first column, e.g. "dev", "stat --qp",
"link add"). Prints what is missing; exits 1 on any problem.
"""
import json
import re
import sys


def documented_fields(doc, command):
    text = open(doc, encoding="utf-8").read()
    section = text.split("## JSON", 1)[1].split("\n## ", 1)[0]
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        if not cells[0].strip("`").startswith(command):
            continue
        fields = cells[1]
        nested = {}
        # `name`: [{`a`, ...}] (array of objects) or `name`: {`a`, ...} (object)
        for m in re.finditer(r"`(\w+)`: \[?\{(.*?)\}\]?", fields):
            nested[m.group(1)] = re.findall(r"`(\w+)`", m.group(2))
        top = re.sub(r"\[?\{.*?\}\]?", "", re.sub(r"\(.*?\)", "", fields))
        return re.findall(r"`(\w+)`", top), nested
    sys.exit(f"check_json: no row for '{command}' in {doc} §JSON")


def main():
    doc, command = sys.argv[1], sys.argv[2]
    top, nested = documented_fields(doc, command)
    raw = sys.stdin.read()
    try:
        data = json.loads(raw)
    except ValueError as e:
        sys.exit(f"check_json: {command}: not JSON ({e}): {raw[:200]!r}")
    if not isinstance(data, list) or not data:
        sys.exit(f"check_json: {command}: expected a non-empty array, got {raw[:200]!r}")
    bad = []
    for i, item in enumerate(data):
        bad += [f"[{i}].{f}" for f in top if f not in item]
        for name, fields in nested.items():
            subs = item.get(name, [])
            for j, sub in enumerate(subs if isinstance(subs, list) else [subs]):
                bad += [f"[{i}].{name}[{j}].{f}" for f in fields if f not in sub]
    if bad:
        sys.exit(f"check_json: {command}: missing documented fields {bad} in {raw[:300]!r}")
    print(f"{command}: {len(data)} element(s), fields {top} present")


if __name__ == "__main__":
    main()
