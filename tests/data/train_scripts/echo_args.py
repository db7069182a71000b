"""A command that prints the words it was given as JSON and exits with `--exit N` (no torch)."""

from __future__ import annotations

import json
import sys

words = sys.argv[1:]
print(json.dumps({"argv": words}))
sys.exit(int(words[words.index("--exit") + 1]) if "--exit" in words else 0)
