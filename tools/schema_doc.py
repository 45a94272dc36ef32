"""Write docs/artifact-fields.md from the artifact's JSON Schema, so the field list cannot drift.

    python3 tools/schema_doc.py            # rewrite docs/artifact-fields.md
    python3 tools/schema_doc.py --check    # exit 1 when the file is not what the schema gives

The meaning of each field is in results/README.md; this page is the schema's own account: every
field, its type and whether a write requires it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "host" / "kitctl" / "schema" / "artifact.schema.json"
OUT = ROOT / "docs" / "artifact-fields.md"


def type_of(node: dict[str, Any]) -> str:
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name})"
    if "enum" in node:
        return " \\| ".join("null" if v is None else f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    for key in ("anyOf", "oneOf"):
        if key in node:
            return " or ".join(type_of(n) for n in node[key])
    t = node.get("type", "any")
    types = t if isinstance(t, list) else [t]
    out = []
    for one in types:
        if one == "array":
            items = node.get("items")
            out.append(f"array of {type_of(items)}" if isinstance(items, dict) else "array")
        else:
            out.append(one)
    return " or ".join(out)


def rows(node: dict[str, Any], prefix: str) -> list[str]:
    lines: list[str] = []
    required = set(node.get("required", []))
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}{key}"
        desc = sub.get("description", "").replace("\n", " ")
        lines.append(f"| `{path}` | {type_of(sub)} | {'yes' if key in required else ''} | {desc} |")
        if sub.get("type") == "object" or (isinstance(sub.get("type"), list) and "object" in sub["type"]):
            lines += rows(sub, path + ".")
        items = sub.get("items")
        if isinstance(items, dict) and "properties" in items:
            lines += rows(items, path + "[].")
    return lines


def render(schema: dict[str, Any]) -> str:
    head = ["# Artifact fields", "",
            "Generated from `host/kitctl/schema/artifact.schema.json` by `tools/schema_doc.py` (a test checks it is",
            "current): every field of a kitctl artifact, its type, and whether a write requires it. What each",
            "field means, and how partials, finals and resumes work: [results/README.md](../results/README.md).", "",
            "## Top level", "", "| field | type | required | note |", "| --- | --- | --- | --- |"]
    body = rows(schema, "")
    for name, sub in schema.get("$defs", {}).items():
        body += ["", f"## {name}", "", "| field | type | required | note |", "| --- | --- | --- | --- |"]
        if "properties" in sub:
            body += rows(sub, "")
        else:
            body.append(f"| (value) | {type_of(sub)} | | |")
    return "\n".join(head + body) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the page differs from the schema's")
    args = ap.parse_args()
    text = render(json.loads(SCHEMA.read_text()))
    if args.check:
        if OUT.exists() and OUT.read_text() == text:
            return 0
        print(f"{OUT.relative_to(ROOT)} is not what the schema gives: run python3 tools/schema_doc.py", file=sys.stderr)
        return 1
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
