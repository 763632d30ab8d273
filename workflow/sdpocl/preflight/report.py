"""The preflight report: a :class:`Check` per line (the result every check returns), the report's text and
its verdict."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

STATUSES = ("ok", "warn", "fail", "skip")


@dataclass(frozen=True)
class Check:
    """One line of the report: ``status`` is ok, warn, fail or skip; ``fix`` says what to do."""

    name: str
    status: str
    message: str
    fix: str = ""
    details: tuple[str, ...] = ()

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {STATUSES}")


def format_report(checks: list[Check], header: str = "") -> str:
    """One line per check (``[FAIL] name: message``), its fix and detail lines indented, and a summary."""
    lines = [header] if header else []
    width = max((len(c.name) for c in checks), default=0)
    for c in checks:
        lines.append(f"[{c.status.upper():>4}] {c.name:<{width}}  {c.message}")
        if c.fix:
            lines.append(f"{'':>7} {'':<{width}}  fix: {c.fix}")
        for d in c.details:
            lines.append(f"{'':>7} {'':<{width}}    {d}")
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    verdict = "FAILED: fix the [FAIL] lines before the grid" if counts["fail"] else "passed"
    lines.append(
        f"preflight {verdict} ({counts['fail']} failed, {counts['warn']} warnings, {counts['ok']} ok, "
        f"{counts['skip']} skipped)"
    )
    return "\n".join(lines) + "\n"


def header(config_name: str, config: dict, results: str | Path) -> str:
    host, preset = socket.gethostname(), config.get("preset")
    return f"sdpocl preflight on {host}: {config_name} (preset {preset}), results {results}"


def failed(checks: list[Check]) -> bool:
    return any(c.status == "fail" for c in checks)
