"""The `command` trainer kind: any program that logs MLPerf `:::MLLOG` lines on stdout."""
