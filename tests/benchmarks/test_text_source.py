"""benchmarks/text_source.py at one step a source: its table's rows and its flag errors
(its figures are not checked: a test never asserts a timing threshold)."""

from __future__ import annotations

import re

import pytest

from benchmarks.text_source import main


def test_one_step_a_source_prints_both_sources_with_their_models(capsys):
    main(["--steps", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("d_model 64, batch 32 x context 16, bf16; medians of 1 steps a source, "
                             "the sources' steps alternating")
    rows = {cells[0]: cells for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[3:])}
    assert list(rows) == ["markov", "corpus"]
    # the quickstart's model on 32 symbols and on bytes: docs/scale-workload.md's 105,216 parameters for w64
    assert rows["markov"][1:3] == ["32", "105,216"] and rows["corpus"][1:3] == ["256", "133,888"]
    assert rows["markov"][-1] == "1" and re.fullmatch(r"\d+\.\d\d \[\d+\.\d\d, \d+\.\d\d\]", rows["corpus"][-1])
    # figures, whatever they are: a Markov source builds in about 0.02 s, printed as 0.00 on a fast machine
    assert all(float(cell) >= 0 for cells in rows.values() for cell in cells[3:6])


@pytest.mark.parametrize("flags", [["--batch", "64"], ["--recipe", "fp9"], ["--steps", "0"]])
def test_a_wrong_flag_is_refused(flags, capsys):
    with pytest.raises(SystemExit) as refused:
        main(flags)
    assert refused.value.code == 2 and "error: argument" in capsys.readouterr().err
