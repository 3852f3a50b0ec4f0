"""The suite's scheduling list names files that exist: a renamed file would silently fall back to the end."""

from pathlib import Path

from tests.conftest import LONGEST_FIRST

REPO = Path(__file__).resolve().parents[1]


def test_every_file_run_first_exists_and_is_named_once():
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert not missing, f"tests/conftest.py LONGEST_FIRST names files that do not exist: {missing}"
