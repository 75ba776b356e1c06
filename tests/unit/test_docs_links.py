"""Every relative link in the documentation leads somewhere: the file exists, and a `#anchor`
matches a heading of its target as GitHub renders it.

A reader who follows a link from the README to a page, or from a page to a section, lands where
the link promised; a page renamed or a heading reworded fails here, naming the link.

GitHub's heading ids (github-slugger, which github.com's renderer follows): the heading's rendered
text, lowercased; every character that is not a letter, a digit, a space, `-` or `_` removed;
each space a `-`; a repeated id gets `-1`, `-2` ... in order of appearance.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ID = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (a `#` or a link in code is not one)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """A heading's id before de-duplication, from its markdown source."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML renders no text of its own
    # emphasis markers go, outside code spans only (`_PARAM` keeps its underscore)
    parts = CODE_SPAN.split(text)  # prose, fence, code, prose, fence, code, ...
    text = "".join(
        part if index % 3 == 2 else re.sub(r"(\*+|(?<!\w)_+|_+(?!\w))", "", part)
        for index, part in enumerate(parts)
        if index % 3 != 1
    )
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every id a reader can link to in the file: headings (duplicates numbered), explicit ids."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        out |= set(HTML_ID.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        out.add(base if count == 0 else f"{base}-{count}")
    return out


def links(path: Path) -> list[str]:
    """The link targets of the file's prose (not in code blocks nor code spans)."""
    out: list[str] = []
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        reference = REFERENCE.match(line)
        if reference:
            out.append(reference.group(1))
            continue
        out += INLINE_LINK.findall(CODE_SPAN.sub("", line))
    return out


def broken_links(path: Path) -> list[str]:
    """Each relative link of the file that does not resolve, with why."""
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / file_part).resolve() if file_part else path
        if not destination.exists():
            problems.append(f"{target}: no such file")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            problems.append(f"{target}: no heading with the id #{anchor} in {destination.name}")
    return problems


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(document):
    # given a documentation page as a reader opens it on GitHub
    # when each of its relative links is followed
    # then it reaches an existing file, and a heading there when it names one
    assert broken_links(document) == []


def test_a_missing_page_and_a_reworded_heading_are_caught(tmp_path):
    # given a page whose links name a missing page, a reworded heading, and a repeated heading
    (tmp_path / "target.md").write_text(
        "# Deploy: your stack\n\n## The model's price (`ModelProvider`)\n\n"
        "## The `_PARAM` *names*\n\n## Notes\n\n## Notes\n\n```\n# not a heading\n```\n",
        encoding="utf-8",
    )
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](target.md#deploy-your-stack) [ok](target.md#the-models-price-modelprovider)\n"
        "[param](target.md#the-_param-names) [second notes](target.md#notes-1)\n"
        "[web](https://example.com/x#y) `[code](gone.md)`\n"
        "[gone](missing.md) [stale](target.md#deploy) [in code](target.md#not-a-heading)\n"
        "[self](#nowhere)\n",
        encoding="utf-8",
    )
    # when the page's links are checked
    problems = broken_links(page)
    # then exactly the four that lead nowhere are named
    assert problems == [
        "missing.md: no such file",
        "target.md#deploy: no heading with the id #deploy in target.md",
        "target.md#not-a-heading: no heading with the id #not-a-heading in target.md",
        "#nowhere: no heading with the id #nowhere in page.md",
    ]
