"""Prints the mutation score of the last ``make mutation`` run, per module and in all, from
mutmut's records (``mutants/<module>.py.meta``). Score = killed (a timeout counts as killed) /
mutants checked; survivors are listed, with their reviews in tests/mutation/SURVIVORS.md.

    python -m tests.mutation.score [mutant-name globs]
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections import Counter
from pathlib import Path


def main(argv: list[str]) -> int:
    from mutmut.stats import status_by_exit_code

    patterns = argv or ["*"]
    totals: Counter = Counter()
    survivors: list[str] = []
    for meta in sorted(Path("mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        picked = {k: v for k, v in codes.items()
                  if any(fnmatch.fnmatch(k, p) for p in patterns)}
        counts = Counter("killed" if status_by_exit_code[c] == "timeout"
                         else status_by_exit_code[c] for c in picked.values())
        if not picked or counts["killed"] + counts["survived"] == 0:
            continue
        checked = counts["killed"] + counts["survived"]
        print(f"{meta.relative_to('mutants').with_suffix('')}: {counts['killed']}/{checked} "
              f"killed ({100 * counts['killed'] / checked:.1f}%)"
              + "".join(f", {n} {status}" for status, n in sorted(counts.items())
                        if status not in ("killed", "survived")))
        totals.update(counts)
        survivors += [k for k, v in picked.items() if status_by_exit_code[v] == "survived"]
    checked = totals["killed"] + totals["survived"]
    if not checked:
        print("no checked mutants: run `make mutation` first")
        return 1
    print(f"mutation score: {totals['killed']}/{checked} = "
          f"{100 * totals['killed'] / checked:.1f}%")
    for name in survivors:
        print(f"  survived: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
