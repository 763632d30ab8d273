"""The docs stay a manual: docs/tiny-preset.md's "Why the defaults" table states config/config.yaml's values,
the page stays short, config and code cite experiments by their entry in docs/experiments/ (not by a row
number of a table that no longer exists), the experiment log's links resolve, and no page cites a file
outside the repository."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "tiny-preset.md"
EXPERIMENTS = ROOT / "docs" / "experiments"
#: a reference page, not a notebook: the history lives in docs/experiments/
MAX_DOC_BYTES = 20_000
#: "row 45", "rows 61-63": a pointer into the experiments table that docs/tiny-preset.md no longer has
ROW_REFERENCE = re.compile(r"\brows? \d+")


def defaults_table(doc: str) -> dict[str, str]:
    """``{key: value}`` of the "Why the defaults" table's rows whose first column is one config key in
    backticks; the value is the second column without its backticks."""
    section = doc.split("\n## Why the defaults\n", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or set(line) <= set("|-: "):
            continue
        key = re.fullmatch(r"`([a-z_][a-z0-9_.]*)`", cells[0])
        if key:
            table[key.group(1)] = cells[1].strip("`")
    return table


def lookup(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def test_defaults_table_states_the_default_config():
    """Each value the table states is the one the workflow runs config/config.yaml with (its schema's
    defaults filled in)."""
    from sdpocl.config import load_config

    table = defaults_table(DOC.read_text())
    config = load_config(ROOT / "config" / "config.yaml")
    checked = 0
    for key, text in table.items():
        try:
            actual = lookup(config, key)
        except (KeyError, TypeError):
            pytest.fail(f"docs/tiny-preset.md names `{key}`, which the config schema does not have")
        stated = yaml.safe_load(text)
        if isinstance(actual, dict):
            if not isinstance(stated, dict):
                continue  # a summary such as "150 / 50 / 50 / 20", not a plain value
            stated_keys = {k: actual.get(k) for k in stated}
            assert stated_keys == stated, f"config/config.yaml {key} = {actual}, the document says {text}"
        else:
            assert actual == stated, f"config/config.yaml {key} = {actual!r}, the document says {text}"
        checked += 1
    assert checked >= 15, f"only {checked} keys of docs/tiny-preset.md's table compared with config/config.yaml"


def test_defaults_table_parser():
    doc = (
        "# T\n## Why the defaults\n\n| key | value | why |\n|---|---|---|\n"
        "| `train.lr` | 3.0e-5 | a reason, `x.y` | 1 |\n| `data.difficulty` | `{a: 1}` | r |\n"
        "| `a.b`, `c.d` | 1, 2 | two keys: skipped |\n| the headline four | x | y |\n"
        "## Next\n| `train.lr` | 9 | not this table |\n"
    )
    assert defaults_table(doc) == {"train.lr": "3.0e-5", "data.difficulty": "{a: 1}"}


def test_tiny_preset_doc_is_short():
    size = len(DOC.read_bytes())
    assert size <= MAX_DOC_BYTES, (
        f"docs/tiny-preset.md has {size} bytes (at most {MAX_DOC_BYTES}): history goes to docs/experiments/"
    )


def test_no_row_numbers_in_config_and_workflow():
    files = [
        p
        for folder in ("config", "workflow")
        for p in sorted((ROOT / folder).rglob("*"))
        if p.suffix in {".yaml", ".py", ".smk"} and "__pycache__" not in p.parts
    ]
    assert files
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}"
        for p in files
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if ROW_REFERENCE.search(line)
    ]
    assert not found, "cite an experiment by its file in docs/experiments/, not by a row number:\n" + "\n".join(found)


def test_row_reference_pattern():
    assert ROW_REFERENCE.search("(docs/tiny-preset.md row 45)")
    assert ROW_REFERENCE.search("rows 61-63")
    assert not ROW_REFERENCE.search("docs/experiments/2026-12-05-row-45-sft-microbatches.md")
    assert not ROW_REFERENCE.search("the arrow 4, a Row 5")


#: the paper's notes outside the repository, which a clone does not have (in two parts, so that a search
#: for the name finds the citations to fix, not this test)
OUTSIDE_NOTES = "PAPER" + ".md"


def test_docs_cite_no_file_outside_the_repository():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    citing = [str(p.relative_to(ROOT)) for p in pages if OUTSIDE_NOTES in p.read_text()]
    assert not citing, f"cite docs/paper.md, not {OUTSIDE_NOTES} (outside the repository): {citing}"
    assert (ROOT / "docs" / "paper.md").exists()


def _heading_anchors(text: str) -> set[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    anchors: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchor, n = slug, 0
        while anchor in anchors:
            n += 1
            anchor = f"{slug}-{n}"
        anchors.add(anchor)
    return anchors


def _relative_links(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", sorted(EXPERIMENTS.glob("*.md")), ids=lambda p: p.name)
def test_experiment_log_links_resolve(page):
    broken = []
    for target in _relative_links(page.read_text()):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file)")
        elif anchor and file.suffix == ".md" and anchor not in _heading_anchors(file.read_text()):
            broken.append(f"{target} (no heading #{anchor})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_experiment_log_indexes_every_entry():
    index = (EXPERIMENTS / "README.md").read_text()
    entries = {p.name for p in EXPERIMENTS.glob("*.md")} - {"README.md"}
    assert entries
    missing = sorted(name for name in entries if f"]({name})" not in index)
    assert not missing, f"docs/experiments/README.md does not list {missing}"
    assert all(re.match(r"\d{4}-\d\d-\d\d-", name) for name in entries), "an entry's file name starts with its date"
