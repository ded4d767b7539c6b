"""Reads docs/first-run.md: its marked blocks (``<!-- first-run: KIND -->`` before a fenced
block), each command (``$ ...``) with the output shown under it, and compares output the way
doctest does (``...`` matches anything, across lines too)."""

from __future__ import annotations

import doctest
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "first-run.md"
_BLOCK = re.compile(r"<!-- first-run: (?P<kind>[^>]*?) -->\n```[a-z]*\n(?P<body>.*?)```",
                    re.S)


@dataclass
class Command:
    line: str
    expected: str = ""  # the output shown under it

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.line.rstrip("&").strip())


@dataclass
class Block:
    kind: str
    body: str
    commands: list[Command] = field(default_factory=list)


def blocks(text: str | None = None) -> list[Block]:
    found = []
    for match in _BLOCK.finditer(PAGE.read_text() if text is None else text):
        block = Block(match["kind"].strip(), match["body"])
        for line in block.body.splitlines():
            if line.startswith("$ "):
                block.commands.append(Command(line[2:]))
            elif block.commands:
                block.commands[-1].expected += line + "\n"
        found.append(block)
    return found


def matches(expected: str, got: str) -> bool:
    """doctest's comparison with ELLIPSIS, trailing spaces ignored."""
    def tidy(text: str) -> str:
        return "\n".join(line.rstrip() for line in text.strip("\n").splitlines()) + "\n"
    return doctest.OutputChecker().check_output(tidy(expected), tidy(got), doctest.ELLIPSIS)


def contains_in_order(expected: str, got: str) -> bool:
    """Every shown line of a "printed-by" excerpt appears in ``got``, in order (``...`` lines
    skip any number of lines; ``...`` inside a line matches any text)."""
    lines = got.splitlines()
    at = 0
    for want in expected.strip("\n").splitlines():
        if want.strip() == "...":
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in want.rstrip().split("...")))
        while at < len(lines) and not pattern.fullmatch(lines[at].rstrip()):
            at += 1
        if at == len(lines):
            return False
        at += 1
    return True
