"""Rewrite the generated parts of the JSON Schemas (``make schemas``): the plan object of
``src/archplace/schemas/common.schema.json`` from the declared fields of the plan, and the types
of the output properties that echo an option (:mod:`archplace.schemas.generate`). Exit status 0
when every file was up to date, 1 when one was rewritten."""

from __future__ import annotations

import sys

from archplace.schemas.generate import generated_files, schema_path, schema_text


def main() -> int:
    changed = False
    for file in generated_files():
        path, text = schema_path(file), schema_text(file)
        rewritten = path.read_text(encoding="utf-8") != text
        if rewritten:
            path.write_text(text, encoding="utf-8")
        changed = changed or rewritten
        sys.stderr.write(f"{path}: {'rewritten' if rewritten else 'up to date'}\n")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
