"""The decoding order, as text (sample.py --show-order) or as a picture: for one prompt, the step at which
each position was revealed, one panel per checkpoint (sample.py --show-order --plot FILE.png).

    text(tok, stats, b, n, max_new, order, colour)    row b as sample.py prints it, the steps marked with
                                                      order

Each panel has two parts that share the columns, one column per position from the first one decoded:
- the text as decoded, one cell per token (a character with the byte tokenizer), coloured by the step that
  revealed it; the last tokens of the prompt precede it in grey, and ∎ marks the end of the reply (EOS);
- below it, position against step: a mark at (position, step) for every decoded token. AR draws a diagonal,
  BD3-LM a staircase of blocks, MDLM a scatter, Set Diffusion a staircase of small overlapping sets.
Colour and the vertical axis both say the step. A step is one row high in every panel, so a shorter chart is
fewer forward passes; the colours run from the panel's first step (dark) to its last (yellow), so that the
tokens of one step share a colour that stands out from its neighbours'.

    panel(title, tok, stats, b, n, max_new) -> Panel   what row b of a sampler's stats draws
    title(name, cfg, settings, knobs) -> str            a panel's heading: the method and its settings
    require(path)                                       matplotlib is there, path writable, its suffix a
                                                        format matplotlib writes (else ValueError)
    draw(panels, path)                                  the picture in that format, written atomically (a
                                                        temporary file, then a rename; ValueError if not)

matplotlib is optional: it is imported only here, when a picture is asked for.
"""
import dataclasses
import math

from common.eval_args import check_output_file
from data.files import figure_format, replaced

COLOURS = [31, 32, 33, 34, 35, 36, 91, 92, 93, 94, 95, 96]     # a terminal's colours, one per step (cycled)


def text(tok, stats, b: int, n: int, max_new: int, order: bool, colour: bool) -> str:
    """Row b of a sampler's stats as printed: the prompt of n tokens (its [MASK]s filled in), then the reply
    up to EOS. With order, each token decoded at step s is coloured by s (colour: a terminal), or each run of
    tokens decoded at the same step is preceded by [s]; prompt tokens (step -1) are left as they are."""
    P = stats["tokens"].shape[1] - max_new
    ids, steps = [], []
    for j, (i, s) in enumerate(zip(stats["tokens"][b, P - n:].tolist(), stats["step"][b, P - n:].tolist())):
        if j >= n and (i == tok.eos_id or s < 0):
            break
        ids.append(i)
        steps.append(s)
    if not order:
        return tok.decode(ids)                   # whole: a character of several bytes stays one character
    out = []
    for k, (i, s) in enumerate(zip(ids, steps)):
        piece = tok.decode([i])
        if colour:
            out.append(f"\033[{COLOURS[s % len(COLOURS)]}m{piece}\033[0m" if s >= 0 else piece)
        else:
            out.append(piece if s < 0 or (k and s == steps[k - 1]) else f"[{s}]{piece}")
    return "".join(out)


# A method's name in a heading (checkpoint config "method"); any other name is shown as it is.
LABELS = {"ar": "AR", "mdlm": "MDLM", "bd3lm": "BD3-LM", "setdiffusion": "Set Diffusion"}
CONTEXT = 4          # prompt tokens drawn in grey before the first decoded position
WIDTH_IN = 7.2       # the figure's width in inches: 720 px at 100 dpi, a README's width
DPI = 200            # sharp when a README scales it down to 720 px


@dataclasses.dataclass
class Panel:
    title: str
    pieces: list[str]    # each position's text as drawn, from the prompt's first token to EOS (included)
    step: list[int]      # the step that revealed each position: the sampler's stats["step"]; -1 = given
    later: list[int]     # the steps of the tokens decoded after EOS (MDLM's padding), counted, not drawn


def glyph(tok, i: int) -> str:
    """Token i as one cell shows it: EOS as ∎, a newline as ↵, an unprintable byte as ·."""
    if i == tok.eos_id:
        return "∎"
    text = tok.decode([i]).replace("\n", "↵")
    return text if text.isprintable() else "·"


def panel(title: str, tok, stats, b: int, n: int, max_new: int) -> Panel:
    """Row b of a sampler's stats (tokens and step, both (B, P + N), P - n the row's first prompt column): its
    n prompt tokens, then its reply up to and including the first EOS (as sample.py prints it, and the EOS),
    or up to the first column never generated. The steps are stats["step"]'s own, unchanged."""
    P = stats["tokens"].shape[1] - max_new
    ids, steps = stats["tokens"][b, P - n:].tolist(), stats["step"][b, P - n:].tolist()
    end = n
    while end < len(ids) and steps[end] >= 0:
        end += 1
        if ids[end - 1] == tok.eos_id:
            break
    later = [s for s in steps[end:] if s >= 0]
    return Panel(title, [glyph(tok, i) for i in ids[:end]], steps[:end], later)


def count(p: Panel) -> str:
    """'26 tokens in 9 steps = 2.9 tokens/step': the row's decoded tokens, those after EOS too, and the steps
    that decoded them (sample.py's tokens/step for one prompt)."""
    decoded = [s for s in p.step if s >= 0] + p.later
    used = len(set(decoded))
    more = f" (+{len(p.later)} after EOS)" if p.later else ""
    rate = len(decoded) / max(used, 1)
    return f"{len(decoded) - len(p.later)} tokens{more} in {used} steps = {rate:.1f} tokens/step"


def title(name: str, cfg, settings, knobs) -> str:
    """'Set Diffusion, smax 8, τ 0.8': the method, its config's whole-number settings (mask_id aside), and
    the decoding settings it reads (knobs): τ and MDLM's block always, a window or commit order when not
    the default."""
    parts = [LABELS.get(name, name)]
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if f.name != "mask_id" and (f.type in (int, "int") or value != f.default):
            parts.append(f"{f.name.replace('_', ' ')} {shown(value)}")
    defaults = type(settings)()
    for knob, label in (("threshold", "τ"), ("mdlm_block", "block"), ("setdiffusion_window", "W"),
                        ("setdiffusion_commit_order", "commit")):
        value = getattr(settings, knob)
        if knob in knobs and (knob in ("threshold", "mdlm_block") or value != getattr(defaults, knob)):
            parts.append(f"{label} {shown(value)}")
    return ", ".join(parts)


def shown(value) -> str:
    return "∞" if value == math.inf else f"{value:g}" if isinstance(value, float) else str(value)


def pyplot():
    """matplotlib.pyplot on its file-only backend (ValueError: one line saying how to install it)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ValueError(f"--plot needs matplotlib ({e}): pip install matplotlib") from None
    return plt


def require(path: str):
    """Check before any work that a picture can be drawn and written to path (ValueError: one line)."""
    check_output_file(path, "--plot")
    pyplot()
    figure_format(path, "--plot")


def first_decoded(p: Panel) -> int:
    return next((j for j, s in enumerate(p.step) if s >= 0), len(p.step))


def columns(p: Panel) -> range:
    """The positions a panel draws: CONTEXT prompt tokens, then from the first decoded position on."""
    return range(max(first_decoded(p) - CONTEXT, 0), len(p.step))


def draw(panels: list[Panel], path: str):
    """panels one above the other under the first panel's prompt, written to path atomically. Every
    panel has the same cell width and step height, so a shorter chart is fewer forward passes."""
    plt = pyplot()
    cols = max(len(columns(p)) for p in panels)
    steps = [max(p.step + p.later + [0]) + 1 for p in panels]
    cell = WIDTH_IN * 0.86 / cols                         # a text cell's side, inches
    row = min(cell / 2, 1.2 / max(steps))                 # one step's height in the charts
    heights = [0.3 + cell * 1.25 + row * n + 0.2 for n in steps]   # heading, text strip, gap, chart, foot
    height = 0.3 + sum(heights)
    fig = plt.figure(figsize=(WIDTH_IN, height))
    cmap = plt.get_cmap("viridis")
    prompt = "".join(panels[0].pieces[:first_decoded(panels[0])])
    fig.text(0.5, 1 - 0.1 / height, f"prompt: {prompt.replace('↵', ' ').strip()}", ha="center", va="top",
             fontsize=8, color="0.4")
    left, width, top = 0.09, cell * cols / WIDTH_IN, height - 0.3
    for p, n, h in zip(panels, steps, heights):
        bottom = top - h + 0.2                            # inches from the figure's foot
        strip = fig.add_axes((left, (bottom + row * n + cell * 0.25) / height, width, cell / height))
        chart = fig.add_axes((left, bottom / height, width, row * n / height))
        fig.text(left, (top - 0.27) / height, p.title, fontsize=8.5, weight="bold", va="bottom")
        fig.text(left + width, (top - 0.27) / height, count(p), fontsize=8, va="bottom", ha="right",
                 color="0.25")
        draw_panel(p, strip, chart, cmap, plt.Normalize(0, max(n - 1, 1)), cell)
        chart.set_xlim(0, cols)
        chart.set_ylim(n + 0.2, -0.2)
        strip.set_xlim(0, cols)
        top -= h
    chart.set_xlabel("position →", fontsize=7, loc="right", labelpad=2)
    save(fig, path, plt)


def draw_panel(p: Panel, strip, chart, cmap, norm, cell: float):
    """One panel: the text strip (a glyph per cell, coloured by its step, the prompt grey) and the chart of
    position against step below it."""
    from matplotlib.patches import Rectangle
    font = max(4.0, min(11.0, cell * 72 * 0.75))
    for x, j in enumerate(columns(p)):
        s = p.step[j]
        colour = cmap(norm(s)) if s >= 0 else (0.9, 0.9, 0.9, 1)
        strip.add_patch(Rectangle((x, 0), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.6))
        ink = "0.45" if s < 0 else ("black" if norm(s) > 0.55 else "white")
        strip.text(x + 0.5, 0.45, p.pieces[j], ha="center", va="center", fontsize=font, color=ink,
                   family="DejaVu Sans Mono")
        if s >= 0:
            chart.add_patch(Rectangle((x, s), 1, 1, facecolor=colour, edgecolor="white", linewidth=0.3))
    strip.set_ylim(0, 1)
    strip.axis("off")
    chart.set_xticks([])
    chart.set_ylabel("step", fontsize=6.5, labelpad=2)
    chart.tick_params(labelsize=6, length=2)
    chart.grid(axis="y", alpha=0.25)
    for side in ("top", "right"):
        chart.spines[side].set_visible(False)


def save(fig, path: str, plt):
    """fig at path in the format its suffix names, whole or not at all (data/files.replaced: a temporary
    file, then a rename); a write that fails (a full disk, a link into a missing folder) is a ValueError of
    one line, and the earlier file stays."""
    try:
        with replaced(path, "wb") as f:
            fig.savefig(f, format=figure_format(path, "--plot"), dpi=DPI)
    except OSError as e:
        raise ValueError(f"cannot write --plot {path} ({e.strerror or e}): the earlier file, if any, is as "
                         f"it was") from None
    finally:
        plt.close(fig)
