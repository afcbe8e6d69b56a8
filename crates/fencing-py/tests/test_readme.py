"""The README's program runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_program_runs_as_written(tmp_path: Path) -> None:
    program = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert program is not None, "no python block in the README"
    code = program.group(1)
    assert "fencing.open_issuer" in code and "issuer.lock" in code
    # In a scratch directory: its SQLite file lands there.
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "reports.db").exists()
