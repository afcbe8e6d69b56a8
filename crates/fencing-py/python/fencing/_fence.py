"""The ``fence`` command of the wheel: the same Rust CLI as ``cargo install
fencing-cli``, shipped inside the package (``fencing/bin/fence``) and run
in place of this process, so its signals, process groups and exit codes
are its own."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main() -> None:
    binary = Path(__file__).resolve().parent / "bin" / "fence"
    if not binary.is_file():
        sys.exit(
            "fence: this install of fencing has no `fence` binary (installed from the sdist?): "
            "install a wheel, or `cargo install fencing-cli`"
        )
    os.execv(binary, [str(binary), *sys.argv[1:]])
