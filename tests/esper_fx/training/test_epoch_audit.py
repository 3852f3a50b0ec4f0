"""Issue 55's two rules of the run loop, counted over a real run (esper_fx/training/epoch_audit.py): every host
read of a batch is a HOST_SYNCS site within its count, and batches after the first compile no XLA program.

The run is the quickstart preset at the tiny size, three batches in process, its signals crossing the DLPack
bridge as in any run. The `gpu` test runs the same audit on CUDA, where the epochs also run under torch's
sync debug mode (skipped cleanly without CUDA; the CPU tests below run the same code, the sync window and
its warning hook included).
"""

from __future__ import annotations

import warnings

import pytest
import torch

from esper_fx.training import epoch_audit
from esper_fx.training.epoch_audit import HOST_SYNCS, audit_config, audit_run, counting, sync_window, violations
from hosts.env.epoch_compute import record_on

READ_BACK = "hosts/env/epoch_compute.py:read_back"
DECISION = "esper_fx/training/epoch.py:run_epoch"


@pytest.fixture(scope="module")
def cpu_audit() -> epoch_audit.Audit:
    return audit_run(audit_config("cpu"))


def test_every_host_read_of_a_run_is_on_the_whitelist_within_its_count(cpu_audit):
    assert cpu_audit.sync_violations() == []
    # the counter sees the epoch's two reads, once per epoch, at their sites
    assert cpu_audit.epochs == 9
    assert cpu_audit.syncs[READ_BACK] == cpu_audit.epochs
    assert cpu_audit.syncs[DECISION] == cpu_audit.epochs


def test_batches_after_the_first_compile_no_program(cpu_audit):
    assert cpu_audit.batches == len(cpu_audit.batch_ends) == 3
    assert "jit(step)" in cpu_audit.first_batch_programs()  # the counter sees programs (compiled or loaded)
    assert cpu_audit.programs_after_first_batch() == []
    assert cpu_audit.problems() == []  # what the doctor's epoch_audit check raises


@pytest.mark.gpu
def test_a_cuda_run_syncs_only_on_the_whitelist_and_compiles_nothing_after_the_first_batch():
    audit = audit_run(audit_config("cuda:0"))
    assert audit.problems() == []
    assert audit.syncs[READ_BACK] == audit.epochs


class _Tensor:
    """Stands in for a tensor whose `record_stream` does what `act` does: called from a project function
    (`record_on`), so its host reads and sync warnings count at that function's site."""

    def __init__(self, act):
        self.record_stream = lambda stream: act()


def test_a_read_or_a_sync_warning_counts_at_the_project_function_that_made_it():
    def cuda_sync():
        warnings.warn(f"{epoch_audit.CUDA_SYNC_WARNING} (the test's)", UserWarning)

    with counting() as counter:
        record_on(object(), [_Tensor(lambda: torch.ones(2).tolist()), _Tensor(lambda: float(torch.ones(())))])
        record_on(object(), [_Tensor(cuda_sync)])  # outside the sync window: not counted
        with sync_window(counter):
            record_on(object(), [_Tensor(cuda_sync)])
    site = "hosts/env/epoch_compute.py:record_on"
    assert dict(counter.counts) == {site: 3}
    assert dict(counter.kinds[site]) == {"torch.tolist": 1, "torch.__float__": 1, "cuda sync": 1}
    assert float(torch.ones(())) == 1.0 and "item" not in vars(torch.Tensor)  # every wrapper is gone again
    # a site off the whitelist fails, naming itself; a whitelisted one fails past its count
    assert [line.split(":")[0:2] for line in violations(counter.counts, epochs=1, batches=1)] == \
        [["hosts/env/epoch_compute.py", "record_on"]]
    epoch_site = next(s for s in HOST_SYNCS if s.per == "epoch")
    assert violations({epoch_site.where: epoch_site.times * 3}, epochs=3, batches=1) == []
    assert "allows" in violations({epoch_site.where: epoch_site.times * 3 + 1}, epochs=3, batches=1)[0]


def test_a_program_compiled_after_the_first_batch_is_a_problem_naming_it():
    audit = epoch_audit.Audit(audit_config("cpu"), syncs=epoch_audit.Counter(), kinds={},
                              programs=["jit(init)", "jit(step)", "jit(update)", "jit(step)"],
                              batch_starts=[1, 3], batch_ends=[3, 4])
    assert audit.first_batch_programs() == ["jit(init)", "jit(step)", "jit(update)"]
    assert audit.problems() == ["1 programs compiled after batch 0: jit(step)"]
