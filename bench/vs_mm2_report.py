"""The figures of `vs_mirrormaker.py`: medians per size and mode, ratios ours / MirrorMaker 2,
shares of the brokers' ceiling, latency percentiles, each at least once and exactly once; as
JSON, a Markdown table and a plot."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common import summary_header

if TYPE_CHECKING:
    from vs_mirrormaker import Drain, Latency

OURS, MM2 = "kafka-mirror", "MirrorMaker 2"
SOURCE = "the source alone"  # the latency runs' consumer straight on A: no mirror in between
BEST_EOS = "best against best, exactly once"
MODES = ("best against best", "equal CPU", BEST_EOS)
SEARCHES = ("search", "search, exactly once")


def exactly_once(mirror: str) -> str:
    """A mirror's name in the figures of its exactly-once runs."""
    return f"{mirror}, exactly once"


FIGURES = (
    ("records_per_second", "records/s"),
    ("cpu_seconds_per_megabyte", "CPU seconds per MB"),
    ("peak_rss_mebibytes", "peak memory MiB"),
)


def ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 2) if theirs else float("nan")


def percentile(samples: list[float], q: int) -> float:
    return statistics.quantiles(samples, n=100)[q - 1]


def figures(runs: list[Drain]) -> dict[str, float]:
    """Medians over the rounds (every run is kept in the summary's "runs")."""
    return {
        "records_per_second": round(statistics.median(d.rate for d in runs), 1),
        "megabytes_per_second": round(statistics.median(d.megabytes / d.seconds for d in runs), 2),
        "cpu_seconds_per_megabyte": round(
            statistics.median(d.cpu_seconds / d.megabytes for d in runs), 5
        ),
        "peak_rss_mebibytes": round(max(d.peak_rss_bytes for d in runs) / 2**20),
    }


def summarize(
    drains: list[Drain],
    latencies: list[Latency],
    ceilings: dict[int, dict[str, float]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    by_size: dict[str, Any] = {}
    for size in args.sizes:
        ceiling = min(ceilings[size]["consume_a"], ceilings[size]["produce_b"])
        entry: dict[str, Any] = {
            "records": args.records[size],
            "ceiling_records_per_second": {**ceilings[size], "lower": ceiling},
        }
        for mode in MODES:
            mirrors = {
                name: [d for d in drains if d.mirror == name and d.size == size and d.mode == mode]
                for name in (OURS, MM2)
            }
            measured = {name: figures(runs) for name, runs in mirrors.items()}
            entry[mode] = {
                **{
                    name: {"setting": runs[0].setting.describe(name), **measured[name]}
                    for name, runs in mirrors.items()
                },
                "ratio_ours_over_mm2": {
                    key: ratio(measured[OURS][key], measured[MM2][key]) for key in measured[OURS]
                },
                "share_of_ceiling": {
                    name: round(measured[name]["records_per_second"] / ceiling, 2)
                    for name in (OURS, MM2)
                },
            }
        eos, alo = entry[BEST_EOS], entry[MODES[0]]
        eos["ratio_to_at_least_once"] = {
            name: ratio(eos[name]["records_per_second"], alo[name]["records_per_second"])
            for name in (OURS, MM2)
        }
        entry["search"] = {
            search: {
                name: {
                    d.setting.describe(name): round(d.rate)
                    for d in drains
                    if d.mirror == name and d.size == size and d.mode == search
                }
                for name in (OURS, MM2)
            }
            for search in SEARCHES
        }
        by_size[str(size)] = entry
    latency: dict[str, Any] = {}
    for rate in sorted({r.rate for r in latencies}):
        at_rate: dict[str, Any] = {}
        for name in (OURS, MM2, exactly_once(OURS), exactly_once(MM2), SOURCE):
            runs = [r for r in latencies if r.mirror == name and r.rate == rate]
            if not runs:
                continue
            at_rate[name] = {
                "setting": runs[0].setting,
                "runs": len(runs),
                "samples": sum(len(r.samples) for r in runs),
                # The median run's: one run's hiccup (of the source, mostly) is not the mirror's.
                **{
                    f"p{q}_ms": round(statistics.median(r.percentile(q) for r in runs), 1)
                    for q in (50, 99)
                },
                "p99_ms_per_run": [round(r.percentile(99), 1) for r in runs],
                # From the producer's start: the mirror's start-up, not counted in the window.
                "first_record_s": round(statistics.median(r.first_record_s for r in runs), 1),
            }
        for ours, theirs, key in (
            (OURS, MM2, "ratio_ours_over_mm2"),
            (exactly_once(OURS), exactly_once(MM2), "ratio_ours_over_mm2_exactly_once"),
        ):
            if ours in at_rate and theirs in at_rate:
                at_rate[key] = {
                    q: ratio(at_rate[ours][q], at_rate[theirs][q]) for q in ("p50_ms", "p99_ms")
                }
        latency[str(rate)] = at_rate
    return {
        **summary_header(
            "kafka-mirror worker vs MirrorMaker 2 (dedicated mode), A -> B on loopback",
            "vs_mirrormaker.py",
        ),
        "candidates": args.candidates,
        "rounds": args.rounds,
        "drain": by_size,
        "latency": latency,
        "runs": [{**d.__dict__, "setting": d.setting.describe(d.mirror)} for d in drains],
    }


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def modes(drain: dict[str, Any]) -> list[str]:
    """The drain modes a summary has (one from before the exactly-once rows has two)."""
    return [mode for mode in MODES if mode in drain]


def table(summary: dict[str, Any]) -> str:
    rows = [("", OURS, MM2, "ours / MM2")]
    for size, drain in summary["drain"].items():
        for mode in modes(drain):
            figures = drain[mode]
            rows.append(
                (f"**{size} B, {mode}**", figures[OURS]["setting"], figures[MM2]["setting"], "")
            )
            for key, label in FIGURES:
                ours, theirs = (number(figures[name][key]) for name in (OURS, MM2))
                rows.append((label, ours, theirs, f"{figures['ratio_ours_over_mm2'][key]:.2f}"))
            share = figures["share_of_ceiling"]
            shares = (f"{share[OURS]:.2f}", f"{share[MM2]:.2f}")
            rows.append(("share of the brokers' ceiling", *shares, ""))
            if "ratio_to_at_least_once" in figures:
                kept = figures["ratio_to_at_least_once"]
                ours, theirs = (f"{kept[name]:.2f}" for name in (OURS, MM2))
                rows.append(("records/s, share of its own at least once", ours, theirs, ""))
        ceiling = drain["ceiling_records_per_second"]
        rows.append(
            (
                f"{size} B: the brokers' ceiling (records/s)",
                f"consume A {ceiling['consume_a']:,.0f}",
                f"produce B {ceiling['produce_b']:,.0f}",
                f"(Java {ceiling['produce_b_java']:,.0f}, "
                f"librdkafka {ceiling['produce_b_librdkafka']:,.0f})",
            )
        )
    for rate, latency in summary["latency"].items():
        rows.append((f"**latency at {int(rate):,} records/s, 1 KB**", "", "", ""))
        for ours, theirs, key, how in (
            (OURS, MM2, "ratio_ours_over_mm2", ""),
            (exactly_once(OURS), exactly_once(MM2), "ratio_ours_over_mm2_exactly_once", ", EOS"),
        ):
            for q in ("p50_ms", "p99_ms") if key in latency else ():
                rows.append(
                    (
                        f"{q[:3]} ms{how} (the source alone: {latency[SOURCE][q]:.1f})",
                        f"{latency[ours][q]:.1f}",
                        f"{latency[theirs][q]:.1f}",
                        f"{latency[key][q]:.2f}",
                    )
                )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = [(size, mode) for size, drain in summary["drain"].items() for mode in modes(drain)]
    short = {MODES[0]: "best", MODES[1]: "equal CPU", BEST_EOS: "best,\nexactly once"}
    labels = [f"{size} B\n{short[mode]}" for size, mode in groups]
    figure, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    panels: list[tuple[str, Callable[[str, str, str], float]]] = [
        (
            "records/s (higher is better)",
            lambda s, mode, m: summary["drain"][s][mode][m]["records_per_second"],
        ),
        (
            "CPU ms per MB (lower is better)",
            lambda s, mode, m: 1000 * summary["drain"][s][mode][m]["cpu_seconds_per_megabyte"],
        ),
        (
            "peak memory MiB (lower is better)",
            lambda s, mode, m: summary["drain"][s][mode][m]["peak_rss_mebibytes"],
        ),
    ]
    width = 0.38
    for axis, (title, value) in zip(axes, panels, strict=False):
        for i, name in enumerate((OURS, MM2)):
            positions = [x + (i - 0.5) * width for x in range(len(groups))]
            axis.bar(positions, [value(s, mode, name) for s, mode in groups], width, label=name)
        axis.set_xticks(range(len(groups)), labels, fontsize=8)
        axis.set_title(title, fontsize=10)
    for size, drain in summary["drain"].items():  # the ceiling once per size, over its modes
        first = groups.index((size, modes(drain)[0]))
        ceiling = drain["ceiling_records_per_second"]["lower"]
        axes[0].hlines(
            ceiling,
            first - 0.5,
            first + len(modes(drain)) - 0.5,
            colors="grey",
            linestyles="dashed",
        )
    points = [
        (rate, q, eos)
        for rate, latency in summary["latency"].items()
        for eos in (False, True)
        if exactly_once(OURS) in latency or not eos
        for q in ("p50_ms", "p99_ms")
    ]

    def run_by(name: str, eos: bool) -> str:
        return exactly_once(name) if eos and name != SOURCE else name

    for i, name in enumerate((OURS, MM2, SOURCE)):
        positions = [x + (i - 1) * width * 2 / 3 for x in range(len(points))]
        axes[3].bar(
            positions,
            [summary["latency"][rate][run_by(name, eos)][q] for rate, q, eos in points],
            width * 2 / 3,
            label=name,
            color="grey" if name == SOURCE else None,
        )
    axes[3].set_ylim(top=axes[3].get_ylim()[1] * 1.25)  # room for the legend above the bars
    axes[3].legend(fontsize=8, ncols=3, loc="upper center")
    axes[3].set_xticks(
        range(len(points)),
        [f"{q[:3]}\n{int(rate):,}/s{chr(10) + 'EOS' if eos else ''}" for rate, q, eos in points],
        fontsize=8,
    )
    axes[3].set_title("latency ms, median run (lower is better)", fontsize=10)
    axes[0].legend(fontsize=8, loc="upper left")
    figure.suptitle(
        f"{summary['what']} (dashed: the brokers' ceiling)\n{summary['date']}, "
        f"{summary['machine']}",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
