"""The README's contents list: every section it names exists under that anchor, and every top-level
section is listed (a renamed or added section that the list misses fails here)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def _anchor(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped, spaces to
    hyphens."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _headings(text: str) -> list[tuple[str, str]]:
    found, in_code = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and (m := re.match(r"^(#{2,3}) (.*)$", line)):
            found.append((m.group(1), m.group(2)))
    return found


def test_the_contents_list_every_section_under_its_anchor():
    text = README.read_text()
    contents = text.split("## Contents", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"\[(.+?)\]\(#([\w\-]+)\)", contents)
    headings = _headings(text)
    anchors = {_anchor(title) for _, title in headings}
    assert links and all(anchor in anchors for _, anchor in links), [a for _, a in links if a not in anchors]
    assert all(_anchor(title) == anchor for title, anchor in links)
    top = [title for level, title in headings if level == "##" and title != "Contents"]
    assert [title for title, _ in links if title in top] == top
