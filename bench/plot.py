#!/usr/bin/python3
"""Draws the latency distributions (ADD and DEL, rcni vs Go) from results.jsonl as a PNG.

Usage: plot.py <results.jsonl> <chart.png>. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    series = {}
    for line in open(src):
        rec = json.loads(line)
        if rec.get("kind") == "samples" and rec["figure"] == "latency" and rec["samples"]:
            series[(rec["item"], rec["implementation"])] = rec["samples"]
    items = sorted({item for item, _ in series})
    if not items:
        sys.exit("no latency samples to plot")
    fig, axes = plt.subplots(1, 2, figsize=(14, 0.9 * len(items) + 2.5), sharey=False)
    for ax, verb in zip(axes, ["ADD", "DEL"]):
        rows = [i for i in items if i.startswith(verb + " ")]
        data, labels, colors = [], [], []
        for item in rows:
            for impl, color in [("rcni", "#d9534f"), ("go", "#5bc0de")]:
                s = series.get((item, impl))
                if s:
                    data.append(s)
                    labels.append(f"{item[len(verb) + 1:]} ({impl})")
                    colors.append(color)
        if not data:
            continue
        box = ax.boxplot(data, vert=False, patch_artist=True, showfliers=True)
        for patch, color in zip(box["boxes"], colors):
            patch.set_facecolor(color)
        ax.set_yticks(range(1, len(labels) + 1))
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel("milliseconds, spawn to exit (lower is better)")
        ax.set_title(f"{verb} latency: rcni (red) vs Go reference (blue)")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
