"""A program that runs another and passes its output on, less the MLLOG lines of some keys:
a submitter's program that forgets to log them.

    python leaves_out.py KEY[,KEY...] PROGRAM [ARGS...]
"""

from __future__ import annotations

import json
import subprocess
import sys

TOKEN = ":::MLLOG "


def main() -> int:
    left_out = set(sys.argv[1].split(","))
    proc = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        at = line.find(TOKEN)
        if at >= 0 and json.loads(line[at + len(TOKEN):]).get("key") in left_out:
            continue
        sys.stdout.write(line)
        sys.stdout.flush()
    return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
