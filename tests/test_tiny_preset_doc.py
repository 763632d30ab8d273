"""docs/tiny-preset.md's final row is the default preset: the two cannot drift apart silently."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def final_row_settings(doc: str) -> dict[str, str]:
    """``key=value`` pairs (dotted config keys, in backticks) of the last row of the experiments table."""
    table = doc.split("## Experiments", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("|") and not set(line) <= set("|-: ")]
    assert len(rows) >= 2, "docs/tiny-preset.md: the experiments table has no rows"
    return dict(re.findall(r"`([a-z_.]+)=([^`]+)`", rows[-1]))


def lookup(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def test_default_config_is_the_documents_final_row():
    settings = final_row_settings((ROOT / "docs" / "tiny-preset.md").read_text())
    assert settings, "docs/tiny-preset.md: the final row names no settings"
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for key, value in settings.items():
        assert lookup(config, key) == yaml.safe_load(value), f"config/config.yaml {key} != the document's {value}"


def test_final_row_parser_reads_the_last_row_only():
    doc = (
        "## Experiments\n| a | b |\n|---|---|\n| `train.lr=1` | x |\n"
        "| `train.lr=2` `base.sft_steps=3` | y |\n## Next\n| `train.lr=9` |\n"
    )
    assert final_row_settings(doc) == {"train.lr": "2", "base.sft_steps": "3"}
