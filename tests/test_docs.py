"""The README and docs/ hold together: every relative link (and its #anchor) leads
somewhere, every `rcpforge ...` line in a code block names a real command and real flags
of the Typer app, and no page points to `../shared/`, which a clone does not have."""

from __future__ import annotations

import re
import shlex
from functools import cache
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def _prose(text: str) -> str:
    """The text outside fenced code blocks and inline code, where links are links."""
    kept, in_block = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
            continue
        if not in_block:
            kept.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def _code_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks."""
    lines, in_block = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            in_block = not in_block
        elif in_block:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, code marks and punctuation
    dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    in_block = False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            in_block = not in_block
        elif not in_block and (match := re.match(r"#{1,6} (.+)", line)):
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def broken_links(page: Path) -> list[str]:
    """Each relative link of the page that leads nowhere, with why."""
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    return broken


@cache
def cli_flags() -> dict[str, set[str]]:
    """Each command of the `rcpforge` app and the long flags it takes."""
    from typer.main import get_command

    from rcpforge.orchestrator.cli import app

    commands = {}
    for name, command in get_command(app).commands.items():
        commands[name] = {opt for param in command.params for opt in param.opts if opt.startswith("--")} | {"--help"}
    return commands


def command_lines(text: str) -> list[str]:
    """The `rcpforge ...` command lines of the code blocks, each with its continuation
    lines (indented lines that start with a flag or an optional `[--flag]`), comments cut."""
    lines: list[str] = []
    for line in _code_lines(text):
        code = line.split(" #")[0].rstrip()
        stripped = code.strip().removeprefix("$ ")
        if stripped.startswith("rcpforge "):
            lines.append(stripped)
        elif lines and code.startswith(" ") and stripped.startswith(("[--", "--")):
            lines[-1] += " " + stripped
    return lines


def wrong_in(line: str) -> list[str]:
    """What in one command line is not the app's: an unknown command or flag."""
    words = shlex.split(line.replace("|", " "), comments=False)
    command = words[1]
    known = cli_flags()
    if command not in known:
        return [f"`{line}`: no command `rcpforge {command}`"]
    flags = {word.strip("[]").split("=")[0].rstrip(".,") for word in words[2:] if word.lstrip("[").startswith("--")}
    return [f"`{line}`: `rcpforge {command}` has no flag {flag}" for flag in sorted(flags - known[command])]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_rcpforge_command_line_names_a_real_command_and_flags(page):
    wrong = [problem for line in command_lines(page.read_text()) for problem in wrong_in(line)]
    assert not wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_clone(page):
    assert "../shared/" not in page.read_text()


def test_the_pages_have_command_lines_and_links_to_check():
    # the checks above are only as good as what they find: the README's tour and the
    # commands page must yield command lines, and every page in docs/ is linked from the index
    assert len(command_lines((ROOT / "README.md").read_text())) >= 5
    synopsis = command_lines((ROOT / "docs" / "commands.md").read_text())
    assert {line.split()[1] for line in synopsis} == set(cli_flags())
    index = (ROOT / "docs" / "index.md").read_text()
    unlinked = [p.name for p in PAGES[1:] if p.name != "index.md" and f"({p.name})" not in index]
    assert not unlinked, f"docs/index.md lacks a link to {unlinked}"


def test_the_checks_catch_what_they_are_for(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n## The field's `newer` recipes\n\n[ok](#the-fields-newer-recipes) "
                    "[gone](missing.md) [bad anchor](page.md#nowhere) [web](https://example.org) `[code](x.md)`\n")
    assert broken_links(page) == [f"missing.md: no file {tmp_path / 'missing.md'}",
                                  "page.md#nowhere: no heading with anchor #nowhere in page.md"]
    lines = command_lines("```\nrcpforge run X.yaml --workers 2   # a comment --bogus\n"
                          "rcpforge analyze X --out D\n           [--refrence R]\nrcpforge frobnicate X\n```\n"
                          "rcpforge run --outside-a-block\n")
    assert lines == ["rcpforge run X.yaml --workers 2", "rcpforge analyze X --out D [--refrence R]",
                     "rcpforge frobnicate X"]
    assert [wrong_in(line) for line in lines] == [
        [], ["`rcpforge analyze X --out D [--refrence R]`: `rcpforge analyze` has no flag --refrence"],
        ["`rcpforge frobnicate X`: no command `rcpforge frobnicate`"]]
