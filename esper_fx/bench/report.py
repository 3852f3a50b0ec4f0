"""Printing benchmark results: one table row per measured case (rich on a terminal, plain text otherwise).

Every benchmark result carries `cases`, a list of dicts; `table_rows` turns each case into
(benchmark, case, implementation median, reference median, ratio) using the result's `columns` entry,
which names the case key, the two timed implementations and the ratio field.
"""

from __future__ import annotations

import sys
from typing import Any, Iterable, TextIO

HEADER = ("benchmark", "case", "measured", "median", "p10–p90", "reference", "ref median", "ratio")


def fmt_seconds(s: float) -> str:
    """Seconds with a unit that keeps three significant figures (ns, µs, ms, s)."""
    if s != s:  # NaN
        return "nan"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def _spread(timing: dict) -> str:
    return f"{fmt_seconds(timing['p10_s'])}–{fmt_seconds(timing['p90_s'])}"


def _case_label(case: dict, key: str) -> str:
    value = case[key]
    if key == "bytes":
        return fmt_bytes(value)
    return f"{key}={value}"


def fmt_bytes(n: int) -> str:
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _fmt_ratio(value: float, share: bool) -> str:
    return f"{100 * value:.2f}%" if share else f"{value:.2f}×"


def table_rows(results: dict[str, Any]) -> Iterable[tuple[str, ...]]:
    for name, result in results.items():
        if "error" in result:
            yield (name, "—", "error", result["error"][:60], "", "", "", "")
            continue
        cols = result["columns"]
        for case in result["cases"]:
            measured, reference = case[cols["measured"]], case[cols["reference"]]
            yield (
                name,
                _case_label(case, cols["case"]),
                cols["measured"],
                fmt_seconds(measured["median_s"]),
                _spread(measured),
                cols["reference"],
                fmt_seconds(reference["median_s"]),
                _fmt_ratio(case["ratio"], result.get("ratio_is_share", False)),
            )


def summary_lines(results: dict[str, Any]) -> list[str]:
    """One line per benchmark with its headline figure and whether the target was met."""
    lines = []
    for name, result in results.items():
        if "error" in result:
            lines.append(f"{name}: ERROR {result['error']}")
        else:
            lines.append(f"{name}: {result['headline']}  [ratio = {result['ratio_definition']}]")
    return lines


def print_results(results: dict[str, Any], stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    rows = list(table_rows(results))
    if stream.isatty():
        _print_rich(rows, results, stream)
    else:
        _print_plain(rows, results, stream)


def _print_plain(rows: list[tuple[str, ...]], results: dict[str, Any], stream: TextIO) -> None:
    widths = [max(len(str(r[i])) for r in rows + [HEADER]) for i in range(len(HEADER))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    print(line(HEADER), file=stream)
    print("  ".join("-" * w for w in widths), file=stream)
    for row in rows:
        print(line(row), file=stream)
    for text in summary_lines(results):
        print(text, file=stream)


def _print_rich(rows: list[tuple[str, ...]], results: dict[str, Any], stream: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="esper_fx benchmarks (medians; each ratio is defined below the table)")
    for i, col in enumerate(HEADER):
        table.add_column(col, justify="right" if i >= 3 else "left")
    for row in rows:
        table.add_row(*row)
    console = Console(file=stream)
    console.print(table)
    for text in summary_lines(results):
        console.print(text)
