"""LaTeX math in Markdown summaries, rendered on the server as MathML (browsers draw it; no script, no CDN).

``math_protect`` swaps every ``$$...$$``, ``\\[...\\]``, ``$...$`` and ``\\(...\\)`` outside code for
a placeholder that Markdown leaves alone (so ``_`` and ``*`` inside formulas are not emphasis);
``math_restore`` puts the formulas back as sanitized MathML once the Markdown is HTML.
"""
from __future__ import annotations

import re
import secrets

import nh3
from django.utils.html import escape
from latex2mathml.converter import convert

__all__ = ["math_protect", "math_restore", "latex_to_mathml"]

# what latex2mathml writes; nothing else may survive (\text{} content is escaped text)
MATHML_TAGS = {
    "math", "semantics", "annotation", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace", "msub", "msup",
    "msubsup", "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd", "mstyle",
    "menclose", "mpadded", "mphantom", "merror", "mfenced", "mmultiscripts", "mprescripts", "none",
}
_MATH_ATTRS = {"mathvariant", "displaystyle", "scriptlevel", "stretchy", "fence", "separator", "lspace", "rspace",
               "minsize", "maxsize", "symmetric", "largeop", "movablelimits", "accent", "accentunder", "form",
               "linethickness", "columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines",
               "frame", "width", "height", "depth", "notation", "open", "close", "separators", "encoding"}
MATHML_ATTRIBUTES = {tag: set(_MATH_ATTRS) for tag in MATHML_TAGS}
MATHML_ATTRIBUTES["math"] = {"xmlns", "display"} | _MATH_ATTRS

_CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]+`)", re.DOTALL)
_MATH = re.compile(
    r"\$\$(?P<d1>.+?)\$\$"  # display $$...$$
    r"|\\\[(?P<d2>.+?)\\\]"  # display \[...\]
    r"|\\\((?P<i2>.+?)\\\)"  # inline \(...\)
    # inline $...$: no blank just inside, no digit right after (so "$5 and $10" stays prose)
    r"|(?<![\\$])\$(?P<i1>[^\s$](?:[^$\n]*?[^\s$\\])?)\$(?!\d)",
    re.DOTALL,
)


def latex_to_mathml(tex: str, *, display: bool) -> str:
    """One formula as sanitized MathML; a formula latex2mathml cannot read stays visible as code."""
    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception:  # noqa: BLE001 - any parse problem of user text: show the source instead
        return f'<code class="math-source">{escape(tex)}</code>'
    clean = nh3.clean(mathml, tags=MATHML_TAGS, attributes=MATHML_ATTRIBUTES, url_schemes=set())
    return f'<span class="math-display">{clean}</span>' if display else clean


def math_protect(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with its formulas (outside code) replaced by placeholders, and the MathML of each."""
    token = secrets.token_hex(6)
    rendered: dict[str, str] = {}

    def one(match: re.Match) -> str:
        display = match.group("d1") is not None or match.group("d2") is not None
        tex = next(g for g in (match.group("d1"), match.group("d2"), match.group("i1"), match.group("i2")) if g is not None)
        key = f"RCBMATH{token}N{len(rendered)}X"
        rendered[key] = latex_to_mathml(tex, display=display)
        # a display formula on its own line becomes its own paragraph, as in LaTeX
        return f"\n\n{key}\n\n" if display else key

    parts = _CODE.split(text or "")
    out = [part if i % 2 else _MATH.sub(one, part) for i, part in enumerate(parts)]
    return "".join(out), rendered


def math_restore(html: str, rendered: dict[str, str]) -> str:
    """Put the MathML back in place of the placeholders (a display formula's own <p> goes away)."""
    for key, mathml in rendered.items():
        html = html.replace(f"<p>{key}</p>", mathml).replace(key, mathml)
    return html
