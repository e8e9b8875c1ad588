"""MLLOG, in one place: `read` replays the MLCommons RCP checker's reading of result
files (per line for a live process, per file for `rcpforge check` and import); `write`
writes a run's `result.txt` around trainers that do not log MLLOG themselves."""
