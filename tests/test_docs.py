"""The docs stand alone: every section citation names a document of this repository and a section it has.

A citation is NAME, a section sign and a number (also NAME.md or docs/NAME.md), possibly continued by more
numbers after commas, "and", "or", or as a range with a dash. NAME must be a file docs/NAME.md and every
number a numbered heading of it (`## 3. ...`, `### 3.2 ...`). A citation without a NAME means the document
last named earlier on the same line; failing that, inside docs/NAME.md it means that document itself, and
anywhere else it is an error, since the reader could not tell which document it means. The outside
specification the project started from is not in the repository, so it is never cited by name either.

The links of README.md and docs/*.md lead somewhere: a relative link names a file of the repository, and its
`#anchor` a heading of that file (as GitHub spells headings' anchors). README.md fits a screen, then points:
at most 250 lines, its contents list before line 40 (issue 56).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("esper_fx", "hosts", "rl", "bridge", "tests", "notebooks", "docs", "README.md")
SUFFIXES = {".py", ".md", ".ipynb", ".txt", ".toml", ".json", ".cfg", ".yaml", ".yml"}
SECTION = "\u00a7"  # the section sign, kept out of this file's own text
NUMBER = r"\d+(?:\.\d+)*"
DOC = r"(?:docs/)?(?P<doc>[A-Z][A-Z_]+)(?:\.md)?\s+"
MORE = rf"(?:\s*(?:,|and|or)\s*{SECTION}\s*{NUMBER}|\s*[\u2013-]\s*{SECTION}?\s*{NUMBER}(?![\d.]))"
CITATION = re.compile(rf"(?:\b{DOC})?{SECTION}\s*(?P<numbers>{NUMBER}{MORE}*)")
OUTSIDE_SPEC = re.compile(r"\bS[P]EC\b")  # the outside specification, by its file's name
HEADING = re.compile(rf"^#{{1,6}}\s+(?P<number>{NUMBER})[.\s]", re.MULTILINE)
LINK = re.compile(r"\[[^\]\n]*\]\((?P<target>[^)\s]+)\)")  # [text](target), markdown's inline link
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$", re.MULTILINE)
README_MAX_LINES = 250
README_CONTENTS_BEFORE_LINE = 40


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
            continue
        for file in sorted(path.rglob("*")):
            parts = file.relative_to(ROOT).parts
            if file.is_file() and file.suffix in SUFFIXES and not any(
                    p.startswith(".") or p == "__pycache__" for p in parts):
                files.append(file)
    return files


def text_of(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".ipynb":  # the cells' sources, as a reader sees them
        cells = json.loads(text)["cells"]
        return "\n".join("".join(cell["source"]) for cell in cells)
    return text


def sections_of(doc: Path) -> set[str]:
    return {m["number"] for m in HEADING.finditer(doc.read_text(encoding="utf-8"))}


def citation_problems(path: Path, text: str) -> list[str]:
    """One line per citation of `text` (the content of `path`) that a reader of this repository could not
    follow; [] when every one resolves."""
    problems = []
    own_doc = path.stem if path.parent == ROOT / "docs" and path.suffix == ".md" else None
    covered = set()
    named_on_line = (0, None)  # (line, the document last named on it)
    for match in CITATION.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        covered.update(i for i in range(match.start(), match.end()) if text[i] == SECTION)
        if match["doc"]:
            named_on_line = (line, match["doc"])
        doc = match["doc"] or (named_on_line[1] if named_on_line[0] == line else None) or own_doc
        where = f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}"
        if doc is None:
            problems.append(f"{where} names no document")
            continue
        doc_path = ROOT / "docs" / f"{doc}.md"
        if not doc_path.is_file():
            problems.append(f"{where} cites {doc}, which is not a document of this repository")
            continue
        numbers = re.findall(NUMBER, match["numbers"])
        missing = sorted(set(numbers) - sections_of(doc_path))
        if missing:
            problems.append(f"{where}: docs/{doc}.md has no section {', '.join(missing)}")
    for i, char in enumerate(text):
        if char == SECTION and i not in covered:
            line = text.count("\n", 0, i) + 1
            problems.append(f"{path.relative_to(ROOT)}:{line}: a section sign that cites no numbered section")
    return problems


def test_every_section_citation_resolves_inside_the_repository():
    problems = [p for path in scanned_files() for p in citation_problems(path, text_of(path))]
    assert problems == [], "\n".join(problems)


def test_no_file_cites_the_outside_specification():
    hits = [f"{path.relative_to(ROOT)}:{text_of(path)[:m.start()].count(chr(10)) + 1}"
            for path in scanned_files() for m in OUTSIDE_SPEC.finditer(text_of(path))]
    assert hits == [], "cites a specification that is not in this repository: " + ", ".join(hits)


def test_the_checker_catches_what_it_is_for():
    """Known-bad citations are reported and good ones pass, so a silent regex cannot pass the suite."""
    code = ROOT / "hosts" / "example.py"
    s = SECTION
    good = f"BEHAVIOUR {s}2.4, {s}2.5 and {s}12.4; ARCHITECTURE {s}2; docs/LEARNING.md {s}4; BEHAVIOUR {s}9.2\u20139.4"
    assert citation_problems(code, good) == []
    assert citation_problems(code, f"(BEHAVIOUR {s}7.3 step 10, {s}7.4)") == []  # the line's last document
    assert len(citation_problems(code, f"BEHAVIOUR {s}7.3\nstep 10, {s}7.4")) == 1  # not the line before's
    for bad in (f"({s}2.4)", f"BEHAVIOUR {s}99.1", f"NOWHERE {s}1", f"BEHAVIOUR {s}2.4, {s}77",
                f"ARCHITECTURE {s}7", f"BEHAVIOUR {s}9.2\u20139.99"):
        assert len(citation_problems(code, bad)) == 1, bad
    learning = ROOT / "docs" / "LEARNING.md"
    assert citation_problems(learning, f"see {s}4") == []  # a bare citation in a doc is to itself
    assert len(citation_problems(learning, f"see {s}42")) == 1
    assert OUTSIDE_SPEC.search("S" + "PEC \u00a71") and not OUTSIDE_SPEC.search("_S" + "PECS = (")
    assert {"1", "1.6", "12.11"} <= sections_of(ROOT / "docs" / "BEHAVIOUR.md")


def anchors_of(doc: Path) -> set[str]:
    """The `#anchor` of every heading of a markdown file, as GitHub makes them: lower case, punctuation
    dropped, spaces as hyphens, `-1`, `-2`, ... after a repeated one; lines of code blocks are no headings."""
    anchors, seen = set(), {}
    for match in MARKDOWN_HEADING.finditer(FENCE.sub("", doc.read_text(encoding="utf-8"))):
        slug = re.sub(r"[^\w\- ]", "", match["title"].lower()).replace(" ", "-")
        anchors.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def link_problems(path: Path, text: str) -> list[str]:
    """One line per relative link of the markdown `text` (the content of `path`) that leads nowhere: a file
    that does not exist, or an anchor no heading of its file has; [] when every one leads somewhere."""
    problems = []
    for match in LINK.finditer(FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)):
        target = match["target"]
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: outside the repository
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}: {target!r}"
        if not linked.exists():
            problems.append(f"{where}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors_of(linked)):
            problems.append(f"{where}: {linked.name} has no heading #{anchor}")
    return problems


def test_every_link_of_the_markdown_docs_leads_somewhere():
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    problems = [p for path in docs for p in link_problems(path, path.read_text(encoding="utf-8"))]
    assert problems == [], "\n".join(problems)


def test_the_link_checker_catches_what_it_is_for():
    readme = ROOT / "README.md"
    assert link_problems(readme, "[guide](docs/USAGE.md#command-line), [web](https://example.org/#x)") == []
    assert link_problems(readme, "```\n[not a link](nowhere.md)\n```") == []  # code, not a link
    for bad in ("[a](docs/NOWHERE.md)", "[a](docs/USAGE.md#no-such-heading)", "[a](#no-such-heading)",
                "[a](LICENSE#anchor)"):
        assert len(link_problems(readme, bad)) == 1, bad
    usage = ROOT / "docs" / "USAGE.md"
    assert link_problems(usage, "[readme](../README.md#what-the-main-command-prints)") == []
    assert {"scaling-out-envs-as-ray-actors", "progress-threads-and-the-warm-start"} <= anchors_of(usage)


def test_the_readme_fits_a_screen_then_points():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    assert "## Contents" in lines, "README.md has no '## Contents' heading"
    assert lines.index("## Contents") + 1 < README_CONTENTS_BEFORE_LINE, "README's contents list comes too late"
