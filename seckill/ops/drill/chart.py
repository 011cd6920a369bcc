"""The drill's chart: answers per second over the drill, purchases and URL requests in two
panels, each split into answered (200), refused (a 4xx, or a 503 that says nothing was decided)
and errors (another 5xx, or no answer); each fault a shaded span from its start to its
recovery, named above the panels in rows so that no two names overlap.

One drawing (a list of shapes) is written twice: as SVG by hand, and as PNG with Pillow, so
that the two cannot differ.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections import defaultdict
from pathlib import Path

from seckill.ops.drill.crowd import Record

SERIES = {"200": "#2e7d32", "refused": "#1565c0", "error": "#c62828", "no answer": "#424242"}
PANELS = (("buy", "purchases (POST)"), ("url", "URL requests (GET)"))
CHAR_W = 6.2  # px per character at 11 px sans-serif, a little over the average (never under)
FONT = 11


@dataclasses.dataclass(frozen=True)
class Shape:
    """One shape: ``line``, ``poly`` (points), ``rect`` (a fill, its opacity) or ``text``
    (``anchor`` start/middle/end, ``rotate`` -90 for the y axis's label)."""

    kind: str
    points: tuple[tuple[float, float], ...]
    colour: str = "#000"
    text: str = ""
    anchor: str = "start"
    dash: bool = False
    opacity: float = 1.0
    rotate: int = 0
    width: float = 1.0


def series(record: Record) -> str:
    """A record's series: ``200``, ``refused``, ``error`` or ``no answer``."""
    if record.status == 200:
        return "200"
    if record.status == 0:
        return "no answer"
    return "refused" if record.refused() else "error"


def text_width(text: str) -> float:
    """An upper estimate of a label's width in px."""
    return len(text) * CHAR_W


def label_rows(spans: list[tuple[float, str]], gap: float = 8.0) -> list[int]:
    """The row of each label ``(x, text)`` (in x order): the first row where it starts after
    the last one there ends, so that no two overlap."""
    ends: list[float] = []
    rows = []
    for x, text in spans:
        row = next((n for n, end in enumerate(ends) if x >= end + gap), len(ends))
        if row == len(ends):
            ends.append(0.0)
        ends[row] = x + text_width(text)
        rows.append(row)
    return rows


def _nice_top(value: int) -> tuple[int, int]:
    """A round top for the y axis and its tick step."""
    raw = max(1.0, value / 4)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return int(step * math.ceil(max(1, value) / step)), int(step)


def drawing(faults: list[tuple[str, float, float]], records: list[Record], width: int = 960
            ) -> tuple[list[Shape], int]:
    """The chart as shapes, and its height. ``faults``: (name, start, end) in seconds."""
    counted = [r for r in records if r.endpoint in ("url", "buy")]
    end = max([r.at for r in counted] + [f[2] for f in faults] + [1.0])
    seconds = int(end) + 1
    left, right = 64, 130
    plot_w = width - left - right

    def x(t: float) -> float:
        return left + plot_w * t / seconds

    marks = sorted((f for f in faults if f[1] > 0), key=lambda f: f[1])
    rows = label_rows([(x(start), name) for name, start, _ in marks])
    lane = 14 * (max(rows, default=-1) + 1) + 8
    panel_h, between = 150, 34
    top = 10 + lane
    height = top + len(PANELS) * (panel_h + between) + 16
    shapes: list[Shape] = []
    for (name, start, _stop), row in zip(marks, rows, strict=True):
        # The name above the panels, a tick under its start; the dashed line only inside
        # the panels, where it crosses no other name.
        y_text = 10 + 14 * row + FONT
        shapes.append(Shape("text", ((x(start) + 2, y_text),), "#333", name))
        shapes.append(Shape("line", ((x(start), y_text - FONT), (x(start), y_text + 2)),
                            "#555"))
        for n in range(len(PANELS)):
            y0 = top + n * (panel_h + between)
            shapes.append(Shape("line", ((x(start), y0), (x(start), y0 + panel_h)), "#888",
                                dash=True))
    for n, (endpoint, title) in enumerate(PANELS):
        y0 = top + n * (panel_h + between)
        bins: dict[str, list[int]] = defaultdict(lambda: [0] * seconds)
        for r in counted:
            if r.endpoint == endpoint:
                bins[series(r)][int(r.at)] += 1
        peak, step = _nice_top(max([max(v) for v in bins.values()] + [1]))

        def y(v: float, y0: float = y0, peak: int = peak) -> float:
            return y0 + panel_h * (1 - v / peak)

        for _, start, stop in marks:
            shapes.append(Shape("rect", ((x(start), y0), (x(max(stop, start + 0.2)), y0 + panel_h)),
                                "#f0a030", opacity=0.15))
        shapes.append(Shape("text", ((width - right + 14, y0 - 6),), "#000", title))
        for v in range(0, peak + 1, step):
            shapes.append(Shape("line", ((left, y(v)), (left + plot_w, y(v))),
                                "#ddd" if v else "#999"))
            shapes.append(Shape("text", ((left - 6, y(v) + 4),), "#333", str(v), "end"))
        shapes.append(Shape("line", ((left, y0), (left, y0 + panel_h)), "#999"))
        shapes.append(Shape("text", ((16, y0 + panel_h / 2),), "#333", "answers / second",
                            "middle", rotate=-90))
        tick = max(1, seconds // 12)
        for t in range(0, seconds, tick):
            shapes.append(Shape("text", ((x(t), y0 + panel_h + 14),), "#333", f"{t}s",
                                "middle"))
        for row, (name, colour) in enumerate(SERIES.items()):
            if name in bins:
                shapes.append(Shape("poly", tuple((x(t + 0.5), y(v))
                                                  for t, v in enumerate(bins[name])),
                                    colour, width=1.6))
            shapes.append(Shape("rect", ((width - right + 14, y0 + 16 * row),
                                         (width - right + 28, y0 + 16 * row + 4)), colour))
            shapes.append(Shape("text", ((width - right + 32, y0 + 16 * row + 6),), "#000",
                                name))
    shapes.append(Shape("text", ((left + plot_w / 2, height - 4),), "#333",
                        "seconds since the crowd began; shaded: a fault until it recovered",
                        "middle"))
    return shapes, height


def to_svg(shapes: list[Shape], width: int, height: int) -> str:
    """The shapes as an SVG document."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="{FONT}">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for s in shapes:
        if s.kind == "line":
            (x1, y1), (x2, y2) = s.points
            dash = ' stroke-dasharray="4 3"' if s.dash else ""
            out.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
                       f'stroke="{s.colour}"{dash}/>')
        elif s.kind == "poly":
            points = " ".join(f"{px:.1f},{py:.1f}" for px, py in s.points)
            out.append(f'<polyline fill="none" stroke="{s.colour}" stroke-width="{s.width}" '
                       f'points="{points}"/>')
        elif s.kind == "rect":
            (x1, y1), (x2, y2) = s.points
            out.append(f'<rect x="{x1:.1f}" y="{y1:.1f}" width="{x2 - x1:.1f}" '
                       f'height="{y2 - y1:.1f}" fill="{s.colour}" fill-opacity="{s.opacity}"/>')
        else:
            (tx, ty), = s.points
            turn = f' transform="rotate({s.rotate} {tx:.1f} {ty:.1f})"' if s.rotate else ""
            out.append(f'<text x="{tx:.1f}" y="{ty:.1f}" text-anchor="{s.anchor}" '
                       f'fill="{s.colour}"{turn}>{html.escape(s.text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_png(shapes: list[Shape], width: int, height: int, path: Path) -> None:
    """The shapes as a PNG (Pillow), at twice the size for sharp text."""
    from PIL import Image, ImageColor, ImageDraw, ImageFont

    scale = 2
    image = Image.new("RGB", (width * scale, height * scale), "white")
    font = ImageFont.load_default(size=FONT * scale)
    draw = ImageDraw.Draw(image, "RGBA")

    def at(point: tuple[float, float]) -> tuple[float, float]:
        return point[0] * scale, point[1] * scale

    for s in shapes:
        rgb = ImageColor.getrgb(s.colour)[:3]
        if s.kind == "line":
            (x1, y1), (x2, y2) = at(s.points[0]), at(s.points[1])
            if s.dash:
                length = math.hypot(x2 - x1, y2 - y1) or 1.0
                for d in range(0, int(length), 14):
                    f1, f2 = d / length, min(1.0, (d + 8) / length)
                    draw.line((x1 + (x2 - x1) * f1, y1 + (y2 - y1) * f1,
                               x1 + (x2 - x1) * f2, y1 + (y2 - y1) * f2), fill=rgb, width=2)
            else:
                draw.line((x1, y1, x2, y2), fill=rgb, width=2)
        elif s.kind == "poly":
            draw.line([at(p) for p in s.points], fill=rgb, width=int(s.width * scale),
                      joint="curve")
        elif s.kind == "rect":
            (x1, y1), (x2, y2) = at(s.points[0]), at(s.points[1])
            draw.rectangle((x1, y1, x2, y2), fill=(*rgb, int(255 * s.opacity)))
        else:
            anchor = {"start": "ls", "middle": "ms", "end": "rs"}[s.anchor]
            if s.rotate:
                box = draw.textbbox((0, 0), s.text, font=font, anchor="lt")
                label = Image.new("RGBA", (int(box[2]) + 2, int(box[3]) + 2), (255, 255, 255, 0))
                ImageDraw.Draw(label).text((0, 0), s.text, font=font, fill=rgb, anchor="lt")
                label = label.rotate(-s.rotate, expand=True)
                cx, cy = at(s.points[0])
                image.paste(label, (int(cx - label.width / 2), int(cy - label.height / 2)),
                            label)
            else:
                draw.text(at(s.points[0]), s.text, font=font, fill=rgb, anchor=anchor)
    image.save(path, optimize=True)
