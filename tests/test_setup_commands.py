"""README's two set-up commands are what CI runs, and both install the recorded versions."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_names_two_setup_commands_that_use_the_constraints():
    commands = _readme_setup_commands()
    assert len(commands) == 2
    assert all("-c constraints.txt" in c for c in commands)
    assert (ROOT / "constraints.txt").is_file()


def test_ci_runs_readme_setup_commands_verbatim():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    for command in _readme_setup_commands():
        assert command in ci, f"README's {command!r} is not run by .ci/run"


def test_constraints_pin_every_numeric_package_exactly():
    pins = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
                if "==" in line and not line.startswith("#"))
    for name in ("torch", "jax", "jaxlib", "numpy", "flax", "optax", "chex"):
        assert name in pins, name
    assert "+" not in pins["torch"]  # a local label would refuse the CUDA build of the same release
