"""The MLCommons RCP checker's own command line, with a campaign's benchmark registered
in its `submission_runs` (it knows only the MLPerf benchmarks). Its `main` prints no
normalization factor, so the factor `check_directory` returned is printed as one JSON
line on stdout.

    python tests/helpers/mlperf_checker.py BENCHMARK RUNS DIR --rcp_usage training --custom_rcps FILE ...
"""

from __future__ import annotations

import json
import sys

from mlperf_logging.rcp_checker import rcp_checker


def main() -> None:
    benchmark, runs = sys.argv[1], int(sys.argv[2])
    rcp_checker.submission_runs["training"][benchmark] = runs
    original = rcp_checker.check_directory

    def reporting(*args, **kwargs):
        passed, message, factor = original(*args, **kwargs)
        print(json.dumps({"passed": bool(passed), "message": message, "norm_factor": float(factor)}), flush=True)
        return passed, message, factor

    rcp_checker.check_directory = reporting  # main() looks it up in the module at call time
    sys.argv = ["rcp_checker", *sys.argv[3:]]
    rcp_checker.main()


if __name__ == "__main__":
    main()
