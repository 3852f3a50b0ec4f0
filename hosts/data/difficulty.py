"""Reproducible difficulty measurements of the offline tasks (BEHAVIOUR §6.6 and §6.7).

    python -m hosts.data.difficulty shapes10 --base-channels 8 --seeds 0 1 2
    python -m hosts.data.difficulty shapes10 --base-channels 32 --seeds 0
    python -m hosts.data.difficulty pytext --lr 0.01 --seeds 0
    python -m hosts.data.difficulty fashion_mnist --epochs 12 --max-train-batches 32 --seeds 0 1

Each run is the single-model equivalent of env 0 of the default loop with no seeds: the shared
split plan of BEHAVIOUR §6.3 (4 envs, per-env batch of the task, env 0's slice), the task's augmentation,
SGD(lr, momentum 0.9, weight decay 5e-4), 25 epochs, validation on the task's whole test split
after every epoch. Prints one line per epoch and a summary line per seed. Use --threads 1 on a busy
machine (two OpenMP threads were 3-4x slower than one on the shared 2-core CPU).

Measured on the 2-core development CPU (final validation accuracy after 25 epochs):
    shapes10, 6,418-parameter host (base 8):  seeds 0/1/2 -> 53.57 / 54.59 / 57.75, mean 55.30
    shapes10, base_channels 32 (94,762 params): seed 0 -> 66.80, seed 1 -> 63.36 (mean 65.08, +9.8 pp)
    pytext, lr 0.01, seed 0: val loss 3.08 nats/byte after epoch 1, 2.30 after epoch 25
    fashion_mnist, 12 epochs of 32 steps (--epochs 12 --max-train-batches 32), seeds 0/1:
        the task's 1,702-parameter host (widths 4, 8, 16), lr 0.02: mean 69.98
        widths 16 32 64 (24,058 params), lr 0.05: mean 78.26 (room a seed can fill)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from hosts.data import shapes10
from hosts.data.batching import pad_for, plan_epoch, resolve_max_batches
from hosts.data.task_data import TaskData, load_task_data, train_batch, val_batches
from hosts.models.cnn import CNNHost
from hosts.layout import to_layout
from hosts.tasks import HOST_MOMENTUM, HOST_WEIGHT_DECAY, TaskSpec, get_task

MEASURED_N_ENVS = 4  # the measurements model env 0 of a 4-env loop: its share of the shared split plan
MEASURED_EPOCHS = 25


def _loss_and_correct(kind: str, logits: torch.Tensor, y: torch.Tensor):
    if kind == "lm":
        logits = logits.reshape(-1, logits.shape[-1])
        y = y.reshape(-1)
    loss = F.cross_entropy(logits, y.long())
    return loss, (logits.argmax(dim=-1) == y).sum(), y.numel()


@torch.no_grad()
def evaluate(model: torch.nn.Module, data: TaskData, batch_size: int) -> tuple[float, float]:
    """(sample-weighted val loss, val accuracy in pp) over the whole test split."""
    model.eval()
    total_loss = torch.zeros((), device=data.device, dtype=torch.float64)
    correct = torch.zeros((), device=data.device, dtype=torch.int64)
    count = 0
    for x, y in val_batches(data, None, batch_size):
        loss, right, n = _loss_and_correct(data.kind, model(x), y)
        total_loss += loss.double() * n
        correct += right
        count += n
    model.train()
    return float(total_loss) / count, 100.0 * float(correct) / count


def train_host(
    task: TaskSpec, data: TaskData, model: torch.nn.Module, seed: int, *,
    epochs: int = MEASURED_EPOCHS, lr: float | None = None, n_envs: int = MEASURED_N_ENVS,
    batch_per_env: int | None = None, max_train_batches: int | None = None, log=print,
) -> list[tuple[float, float, float]]:
    """Train `model` like env 0 of the loop; returns [(val_loss, val_acc, seconds)] per epoch."""
    bpe = batch_per_env or task.batch_size
    opt = torch.optim.SGD(model.parameters(), lr=lr or task.host_lr, momentum=HOST_MOMENTUM,
                          weight_decay=HOST_WEIGHT_DECAY)
    max_batches = resolve_max_batches(max_train_batches, task.max_train_batches)
    history = []
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        plan = plan_epoch(data.n_train, n_envs=n_envs, batch_per_env=bpe, split="shared",
                          max_batches=max_batches, seed=seed, batch_idx=0, epoch=epoch, envs_running=1,
                          pad=pad_for(data.x_train.shape[-1]) if data.augment else None).to(data.device)
        model.train()
        for step in range(plan.num_steps):
            x, y = train_batch(data, plan, 0, step)
            loss, _, _ = _loss_and_correct(data.kind, model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        train_s = time.perf_counter() - start
        val_loss, val_acc = evaluate(model, data, bpe)
        history.append((val_loss, val_acc, train_s))
        log(f"  epoch {epoch:2d}  val_loss {val_loss:.4f}  val_acc {val_acc:6.2f}  train {train_s:.1f}s")
    return history


def _build_model(task: TaskSpec, base_channels: int | None, seed: int, *, in_channels: int = 3,
                 widths: list[int] | None = None, kernel_size: int = 3) -> torch.nn.Module:
    """The task's host (or a CNN host of `base_channels` or `widths`), in the task's layout as the loop
    builds it."""
    torch.manual_seed(seed)
    if base_channels is None and widths is None:
        return to_layout(task.build_host(), task.topology)
    host = CNNHost(num_classes=task.num_classes, base_channels=base_channels or 8, widths=widths,
                   kernel_size=kernel_size, in_channels=in_channels)
    return to_layout(host, task.topology)


def _shapes10_with_knobs(args) -> TaskData:
    changes = {}
    for item in args.knob:
        name, value = item.split("=", 1)
        default = getattr(shapes10.DEFAULT_KNOBS, name)
        changes[name] = tuple(float(v) for v in value.split(",")) if isinstance(default, tuple) else type(default)(value)
    knobs = shapes10.DEFAULT_KNOBS._replace(**changes)
    print(f"shapes10 knobs: {knobs}")
    sizes = {"n_train": args.train_samples, "n_test": args.test_samples, "data_seed": args.data_seed}
    x_tr, y_tr, x_te, y_te = shapes10.generate(**{k: v for k, v in sizes.items() if v is not None}, device="cpu",
                                               knobs=knobs)
    return TaskData("classification", x_tr, y_tr, x_te, y_te, torch.zeros(3))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", help="task name, e.g. shapes10 or pytext")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--base-channels", type=int, default=None, help="CNN width (default: the task host)")
    parser.add_argument("--widths", type=int, nargs="+", default=None, help="CNN channels per block")
    parser.add_argument("--kernel-size", type=int, default=3, help="CNN kernel size (with --widths)")
    parser.add_argument("--max-train-batches", type=int, default=None, help="steps per epoch (default: the task's)")
    parser.add_argument("--lr", type=float, default=None, help="host lr (default: the task's)")
    parser.add_argument("--epochs", type=int, default=MEASURED_EPOCHS)
    parser.add_argument("--data-seed", type=int, default=None, help="shapes10 seed (default: the dataset's)")
    parser.add_argument("--train-samples", type=int, default=None, help="shapes10 size (default: the dataset's)")
    parser.add_argument("--test-samples", type=int, default=None, help="shapes10 size (default: the dataset's)")
    parser.add_argument("--data-dir", default=None, help="where CIFAR-10 / TinyStories live")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (1 is best on a busy CPU)")
    parser.add_argument("--knob", action="append", default=[], metavar="NAME=VALUE",
                        help="shapes10 only: override a generator knob (tuning experiments)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    task = get_task(args.task)
    start = time.perf_counter()
    if args.knob:
        data = _shapes10_with_knobs(args)
    else:
        data = load_task_data(task, torch.device("cpu"), data_root=args.data_dir, data_seed=args.data_seed,
                              synthetic_train_samples=args.train_samples, synthetic_test_samples=args.test_samples)
    print(f"{task.name}: data built in {time.perf_counter() - start:.1f}s "
          f"(train {data.n_train}, test {data.n_test})")
    finals = []
    for seed in args.seeds:
        model = _build_model(task, args.base_channels, seed, in_channels=data.x_train.shape[1],
                             widths=args.widths, kernel_size=args.kernel_size)
        params = sum(p.numel() for p in model.parameters())
        print(f"seed {seed}: {type(model).__name__} with {params:,} parameters, lr {args.lr or task.host_lr}")
        history = train_host(task, data, model, seed, epochs=args.epochs, lr=args.lr,
                             max_train_batches=args.max_train_batches)
        val_loss, val_acc, _ = history[-1]
        mean_s = sum(h[2] for h in history) / len(history)
        best_loss = min(h[0] for h in history)
        finals.append((val_loss, val_acc))
        print(f"seed {seed}: final val_loss {val_loss:.4f} (best {best_loss:.4f})  final val_acc {val_acc:.2f}  "
              f"{mean_s:.2f}s per env-epoch of training")
    mean_acc = sum(a for _, a in finals) / len(finals)
    mean_loss = sum(v for v, _ in finals) / len(finals)
    print(f"{task.name}: mean over seeds {args.seeds}: val_acc {mean_acc:.2f}  val_loss {mean_loss:.4f}")


if __name__ == "__main__":
    main()
