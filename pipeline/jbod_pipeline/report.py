"""Self-contained HTML reports: matplotlib figures embedded as PNG data, small tables, no scripts.

Guarantees: `render` returns one HTML document that needs nothing else (no network, no files);
every figure is drawn from a pandas frame of a job's output table, read back from its Parquet, so
the report shows exactly what was written. Large tables are cut to their first rows, saying so.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

MAX_ROWS = 50
HEATMAP_BROKERS = 60


@dataclass(slots=True)
class Section:
    title: str
    blocks: list[str] = field(default_factory=list)

    def text(self, value: str) -> None:
        self.blocks.append(f"<p>{html.escape(value)}</p>")

    def facts(self, items: Sequence[tuple[str, Any]]) -> None:
        rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in items)
        self.blocks.append(f'<table class="facts">{rows}</table>')

    def figure(self, fig: Figure, caption: str) -> None:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
        plt.close(fig)
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        self.blocks.append(
            f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        )

    def table(self, frame: pd.DataFrame, caption: str, *, limit: int = MAX_ROWS) -> None:
        shown = frame.head(limit)
        note = f" (first {limit} of {len(frame)})" if len(frame) > limit else ""
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in shown.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
            for row in shown.itertuples(index=False)
        )
        self.blocks.append(
            f"<h3>{html.escape(caption + note)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-top: 1em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 2px 8px; text-align: right; }
th { background: #f4f4f4; } table.facts th { text-align: left; }
figure { margin: 1em 0; } figcaption { font-size: 0.85em; color: #555; }
"""


def render(title: str, sections: Sequence[Section]) -> str:
    parts = [f"<section><h2>{html.escape(s.title)}</h2>{''.join(s.blocks)}</section>" for s in sections]
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{''.join(parts)}</body></html>"
    )


# -- figures -------------------------------------------------------------------------------------


def _dir_matrix(frame: pd.DataFrame, value: str) -> tuple[np.ndarray, list[int]]:
    """Brokers x dir slots (each broker's dirs in id order) of `value`; NaN where no dir."""
    ordered = frame.sort_values(["brokerId", "directoryId"])
    brokers = sorted(ordered["brokerId"].unique().tolist())
    width = int(ordered.groupby("brokerId").size().max()) if len(ordered) else 0
    matrix = np.full((len(brokers), max(width, 1)), np.nan)
    row_of = {b: i for i, b in enumerate(brokers)}
    for broker, group in ordered.groupby("brokerId"):
        values = group[value].astype(float).to_numpy()
        matrix[row_of[broker], : len(values)] = values
    return matrix, brokers


def heatmap(
    frame: pd.DataFrame, value: str, *, title: str, vmax: float | None = None, cmap: str = "viridis"
) -> Figure:
    matrix, brokers = _dir_matrix(frame, value)
    height = min(12.0, 1.5 + 0.18 * len(brokers))
    fig, ax = plt.subplots(figsize=(8, height))
    image = ax.imshow(matrix, aspect="auto", cmap=cmap, vmin=0, vmax=vmax, interpolation="nearest")
    ax.set_xlabel("dir (per broker, in id order)")
    if matrix.shape[1] <= 32:
        ax.set_xticks(range(matrix.shape[1]))
    ax.set_ylabel("broker")
    if len(brokers) <= 60:
        ax.set_yticks(range(len(brokers)), [str(b) for b in brokers], fontsize=7)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=value)
    return fig


def histogram(values: pd.Series, *, title: str, xlabel: str, marker: float | None = None) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    clean = values.dropna().astype(float)
    ax.hist(clean, bins=min(50, max(5, len(clean) // 4 or 5)), color="#4c72b0")
    if marker is not None:
        ax.axvline(marker, color="#c44e52", linestyle="--", label=f"threshold {marker:.0%}")
        ax.legend()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("dirs")
    return fig


def bars(labels: Sequence[str], series: dict[str, Sequence[float]], *, title: str) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.5))
    x = np.arange(len(labels))
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + i * width, values, width, label=name)
    ax.set_xticks(x + width * (len(series) - 1) / 2, labels, rotation=60, ha="right", fontsize=7)
    ax.set_title(title)
    ax.legend()
    return fig


def before_after(before: pd.Series, after: pd.Series, *, title: str, threshold: float) -> Figure:
    fig, ax = plt.subplots(figsize=(8, 3.2))
    bins = np.linspace(0, max(1.0, float(np.nanmax([before.max(), after.max(), threshold]))), 40)
    ax.hist(before.dropna(), bins=bins.tolist(), alpha=0.6, label="before", color="#c44e52")
    ax.hist(after.dropna(), bins=bins.tolist(), alpha=0.6, label="after the plan", color="#55a868")
    ax.axvline(threshold, color="black", linestyle="--", label=f"threshold {threshold:.0%}")
    ax.set_xlabel("utilisation")
    ax.set_ylabel("dirs")
    ax.set_title(title)
    ax.legend()
    return fig


def timeline_scatter(frame: pd.DataFrame, *, title: str) -> Figure:
    fig, ax = plt.subplots(figsize=(9, 3.2))
    kinds = sorted(frame["type"].unique().tolist())
    for i, kind in enumerate(kinds):
        offsets = frame.loc[frame["type"] == kind, "offset"]
        ax.scatter(offsets, np.full(len(offsets), i), s=8, label=kind)
    ax.set_yticks(range(len(kinds)), kinds)
    ax.set_xlabel("metadata offset")
    ax.set_title(title)
    return fig
