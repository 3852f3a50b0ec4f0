"""The fuzz of bad inputs (tests/esper_fx/bad_inputs.py): every one is a clean rejection (issues 12 and 22).

Each of the ~210 cases (train: flags, JSON configs, filesystem situations, resumes; prove: flags, seed sets,
arms, output paths, checkpoints) must end with exit code 2,
one line on stderr naming the problem, no traceback, and nothing written. Most run in-process; the few
that need a full disk or a read-only mount run in a subprocess inside a private mount namespace.
"""

import pytest

from tests.esper_fx import bad_inputs


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The fuzz's directory for the whole file: every case has its own folder in it, and the resume cases
    copy the one finished run it keeps."""
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.slow
def test_every_bad_input_is_rejected_cleanly_with_nothing_written(workdir):
    # issue 39's cases run one by one below, under the same checks and more
    cases = [case for case in bad_inputs.all_cases() if case not in bad_inputs.ISSUE_39_CASES]
    outcomes = bad_inputs.run_all(cases, workdir=workdir)
    counts = bad_inputs.counts(outcomes)
    assert counts["cases"] >= 100
    bad = [o.describe() for o in outcomes if not o.clean]
    assert not bad, "\n".join(bad)
    assert counts["clean"] == counts["cases"] and counts["tracebacks"] == 0


@pytest.mark.parametrize("case", bad_inputs.ISSUE_39_CASES, ids=lambda case: case.name)
def test_each_fault_of_issue_39_is_one_line_naming_it_exit_2_and_nothing_written(case, workdir):
    """Issue 39's faults, one by one (the fuzz above leaves them to this test): the resume manifest whose counts
    disagree, data errors with Ray workers, unchecked seeds and values, ..."""
    with bad_inputs.offline():
        outcome = bad_inputs.run_case(case, workdir)
    assert outcome.code == 2 and not outcome.traceback, outcome.describe()
    assert len(outcome.stderr.strip().splitlines()) == 1, outcome.stderr
    assert case.needle in outcome.stderr, outcome.stderr
    assert outcome.wrote == [], outcome.wrote
