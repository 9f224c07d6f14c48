"""Write a report as markdown and HTML: a title, an intro, tables, then plots.

Shared by every workload's sweep report (the failure study, the functions report).
"""

from __future__ import annotations

import html
from pathlib import Path

Section = tuple[str | None, list[str], list[list[str]]]  # (heading, column heads, rows)


def write_pages(
    out: Path, title: str, intro: str, sections: list[Section], pngs: list[str]
) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html``: title, intro, tables, then the plots."""
    md = [f"# {title}", "", intro]
    page = (
        f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{border:1px solid #ccc;"
        "padding:3px 6px;font-size:13px}table{border-collapse:collapse}</style>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(intro)}</p>"
    )
    for heading, head, rows in sections:
        if heading:
            md += ["", f"## {heading}"]
            page += f"<h2>{html.escape(heading)}</h2>"
        md += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        md += ["| " + " | ".join(r) + " |" for r in rows]
        page += "<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
        page += "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows
        )
        page += "</table>"
    md += [""] + [f"![{p}]({p})" for p in pngs]
    page += "".join(f"<p><img src='{p}'></p>" for p in pngs)
    (out / "report.md").write_text("\n".join(md) + "\n")
    (out / "report.html").write_text(page)
    return out / "report.md", out / "report.html"
