"""Jupyter's progress line (issue 37): one output updated in place after every epoch, off when quiet."""

import io
import sys

import esper_fx
from esper_fx.config import TrainingConfig
from esper_fx.outputs import notebook_bar
from tests.esper_fx import tiny

TINY = dict(tiny.TINY, device="cpu", controller="wait", tensorboard=False, report=False)


class FakeHandle:
    def __init__(self, shown):
        self.shown = [shown["text/plain"]]

    def update(self, obj, raw):
        assert raw
        self.shown.append(obj["text/plain"])


def test_a_notebook_run_updates_one_progress_line_after_every_epoch(monkeypatch, capsys):
    handles = []
    monkeypatch.setattr(notebook_bar, "in_notebook", lambda stream: True)
    monkeypatch.setattr(notebook_bar, "open_display", lambda text: handles.append(FakeHandle({"text/plain": text}))
                        or handles[-1])
    from esper_fx.outputs import console
    monkeypatch.setattr(console, "in_notebook", notebook_bar.in_notebook)
    esper_fx.run(TrainingConfig(**TINY), run_dir=False)
    (handle,) = handles
    assert len(handle.shown) == 1 + 2 * 3  # opened, then one update per epoch of the two batches
    assert handle.shown[1].startswith("batch 1/2 · episodes 1-2/4 · epoch 1/3 · [")
    assert handle.shown[-1].startswith("batch 2/2 · episodes 3-4/4 · epoch 3/3 · [" + "#" * 24 + "] 100%")
    assert "ETA 0:00:00" in handle.shown[-1]
    assert "BATCH 1 |" in capsys.readouterr().out  # the per-batch lines still print below it
    handles.clear()
    esper_fx.run(TrainingConfig(**TINY), run_dir=False, quiet=True)
    assert handles == []


def test_only_a_jupyter_kernels_stdout_is_a_notebook(monkeypatch):
    assert not notebook_bar.in_notebook(io.StringIO())
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    assert not notebook_bar.in_notebook(sys.stdout)  # never imports IPython itself


def test_the_bar_text():
    assert notebook_bar.bar_text(0.5, width=10) == "[#####-----]  50%"
    assert notebook_bar.bar_text(1.2, width=4) == "[####] 100%"
