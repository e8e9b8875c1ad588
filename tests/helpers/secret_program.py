"""An instant command trainer that proves it was given its credentials without showing
them (stdlib only):

    python secret_program.py OUTPUT_DIR

Writes OUTPUT_DIR/seen.json, the SHA-256 of HF_TOKEN and of WANDB_API_KEY as it found
them in its environment, then converges at its first eval."""

import hashlib
import json
import os
import sys
from pathlib import Path

NAMES = ("HF_TOKEN", "WANDB_API_KEY")


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def main() -> None:
    from recording_program import converge  # beside this file: the script's folder is first on sys.path

    seen = {name: digest(os.environ[name]) if name in os.environ else None for name in NAMES}
    (Path(sys.argv[1]) / "seen.json").write_text(json.dumps(seen))
    converge()


if __name__ == "__main__":
    main()
