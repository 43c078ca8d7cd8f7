"""Rewrite the generated parts of the JSON Schemas (``make schemas``): the plan object of
``src/archplace/schemas/common.schema.json`` from the declared fields of the plan
(:mod:`archplace.schemas.generate`). Exit status 0 when the file was up to date, 1 when it was
rewritten."""

from __future__ import annotations

import sys

from archplace.schemas.generate import common_path, common_text


def main() -> int:
    path, text = common_path(), common_text()
    changed = path.read_text(encoding="utf-8") != text
    if changed:
        path.write_text(text, encoding="utf-8")
    sys.stderr.write(f"{path}: {'rewritten' if changed else 'up to date'}\n")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
