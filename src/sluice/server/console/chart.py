"""Charts drawn on the server as inline SVG: a line over time, and a dashed line for a
limit it is drawn against. No script draws them, so they need no build step."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from markupsafe import Markup, escape

__all__ = ["line_chart", "rates", "sparkline"]


def rates(points: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """Net change per second between successive points (in less out)."""
    return [(t1, (v1 - v0) / (t1 - t0)) for (t0, v0), (t1, v1) in pairwise(points) if t1 > t0]


def sparkline(
    points: Sequence[tuple[float, float]], *, width: int = 120, height: int = 24
) -> Markup:
    """A small line of ``points`` (time, value), without axes."""
    path = _path(points, width, height, 2, _top(points, None))
    line = f'<polyline points="{path}" fill="none" stroke="currentColor" stroke-width="1.5"/>'
    # Every value put in is a number, or escaped.
    return Markup(  # noqa: S704
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="depth over time">{line if path else ""}</svg>'
    )


def line_chart(
    points: Sequence[tuple[float, float]],
    *,
    title: str,
    limit: float | None = None,
    limit_label: str = "limit",
    width: int = 640,
    height: int = 160,
) -> Markup:
    """A line of ``points`` (time, value) with its scale, its latest value in the title,
    and ``limit`` as a dashed line."""
    pad = 28
    top = _top(points, limit)
    path = _path(points, width - pad, height - 2 * 8, 8, top, left=pad)
    latest = _number(points[-1][1]) if points else "no samples yet"
    parts = [
        f'<svg class="chart" width="100%" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(title)}" data-latest="{escape(latest)}" data-points="{len(points)}">',
        f'<text x="{pad}" y="12" class="title">{escape(title)}: {escape(latest)}</text>',
        f'<text x="2" y="{height - 8}" class="axis">{_number(min(0.0, _bottom(points)))}</text>',
        f'<text x="2" y="24" class="axis">{_number(top)}</text>',
        f'<line x1="{pad}" y1="{height - 8}" x2="{width}" y2="{height - 8}" class="base"/>',
    ]
    if limit is not None:
        y = _y(limit, top, height - 16, 8, _bottom(points))
        parts.append(
            f'<line x1="{pad}" y1="{y:.1f}" x2="{width}" y2="{y:.1f}" class="limit"/>'
            f'<text x="{width - 4}" y="{y - 3:.1f}" text-anchor="end" class="limit-label">'
            f"{escape(limit_label)} {_number(limit)}</text>"
        )
    if path:
        parts.append(f'<polyline points="{path}" class="line"/>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 (numbers, and escaped text)


def _top(points: Sequence[tuple[float, float]], limit: float | None) -> float:
    values = [v for _, v in points] + ([limit] if limit is not None else [])
    return max([1.0, *values])


def _bottom(points: Sequence[tuple[float, float]]) -> float:
    return min([0.0, *(v for _, v in points)])


def _y(value: float, top: float, span: float, offset: float, bottom: float) -> float:
    return offset + span - (value - bottom) / ((top - bottom) or 1.0) * span


def _path(
    points: Sequence[tuple[float, float]],
    width: float,
    height: float,
    offset: float,
    top: float,
    *,
    left: float = 0.0,
) -> str:
    if not points:
        return ""
    first, last = points[0][0], points[-1][0]
    spread = (last - first) or 1.0
    bottom = _bottom(points)
    return " ".join(
        f"{left + (t - first) / spread * width:.1f},{_y(v, top, height, offset, bottom):.1f}"
        for t, v in points
    )


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
