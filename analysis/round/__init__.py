"""A published round of MLPerf results: each submission's verdict and score
(`verdicts.py`), like with like across submissions (`groups.py`), precision factors
(`precision.py`), and the outputs besides the console (`report.py`, `plots.py`)."""
