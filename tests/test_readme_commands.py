"""The README is a manual that stays true: every command it shows in a shell code block still runs
(Snakemake lines as dry runs into a temporary results folder, `sdpocl` subcommands and their options,
`pip install` extras, `pytest` options, `tensorboard`), it stays short, and every relative link of the
README and of docs/ points at a file (and heading) that exists."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
from workflow_utils import BIN, NOLOCK, ROOT

README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
#: the other pages the README links to
OTHER_PAGES = [ROOT / "config" / "README.md", ROOT / "profiles" / "README.md"]
#: a manual, not a notebook: history, measurements and details live in docs/
MAX_README_BYTES = 10_500
#: code blocks whose lines are commands
SHELL_LANGS = {"bash", "sh", "shell", "console"}
#: set-up commands shown for completeness, with nothing of this project's to check
UNCHECKED = {"python3.11", "python3", ".", "source", "cd", "ssh"}
SEPARATORS = {"&&", "||", ";", "|", "&"}


def shell_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks in a shell language."""
    blocks = re.findall(r"^```([\w-]*)[^\n]*\n(.*?)^```", text, re.M | re.S)
    return [body for lang, body in blocks if lang in SHELL_LANGS]


def shell_commands(text: str) -> list[list[str]]:
    """Every simple command of the shell blocks, as argv: comments dropped, `\\` continuations joined,
    `&&` / `;` / `|` chains split."""
    commands = []
    for body in shell_blocks(text):
        for line in re.sub(r"\\\n", " ", body).splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            command: list[str] = []
            for token in [*lexer, ";"]:
                if token in SEPARATORS:
                    if command:
                        commands.append(command)
                    command = []
                else:
                    command.append(token)
    return commands


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, timeout=120, **kwargs)


def output(proc: subprocess.CompletedProcess) -> str:
    return f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"


# ----------------------------------------------------------------------------------------------
# one check per command


def dry_run_argv(command: list[str], results: Path) -> list[str]:
    """The README's Snakemake line as a dry run that writes nothing: its own options and targets,
    the results folder moved to ``results`` (and the job server off), ``-n`` and ``--nolock``."""
    args = command[1:]
    targets: list[str] = []
    if "--" in args:
        cut = args.index("--")
        args, targets = args[:cut], args[cut:]
    ours = [f"results={results}", "job_server=false"]
    if "--config" in args:
        start = args.index("--config") + 1
        end = start
        while end < len(args) and not args[end].startswith("-"):
            end += 1
        kept = [a for a in args[start:end] if not a.startswith(("results=", "job_server="))]
        args = [*args[:start], *kept, *ours, *args[end:]]
    else:
        args = [*args, "--config", *ours]
    args += ["-n", *NOLOCK]
    if not any(a.startswith("--profile") for a in args) and not any(a in ("--cores", "-c") for a in args):
        args += ["--cores", "1"]
    return [str(BIN / "snakemake"), *args, *targets]


def check_snakemake(command: list[str], tmp_path: Path) -> None:
    results = tmp_path / "results"
    proc = run(dry_run_argv(command, results))
    assert proc.returncode == 0, f"`{shlex.join(command)}` does not dry-run:\n{output(proc)}"
    assert not results.exists(), f"`{shlex.join(command)}`: the dry run wrote {sorted(results.rglob('*'))[:5]}"


def check_sdpocl(command: list[str], tmp_path: Path) -> None:
    sub = [a for a in command[1:2] if not a.startswith("-")]
    proc = run([str(BIN / "sdpocl"), *sub, "--help"])
    assert proc.returncode == 0, f"`{shlex.join(command)}`: no such sdpocl subcommand:\n{output(proc)}"
    for arg in command[1 + len(sub) :]:
        if arg.startswith("--"):
            option = arg.split("=", 1)[0]
            assert re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", proc.stdout), (
                f"`{shlex.join(command)}`: sdpocl {' '.join(sub)} has no option {option}"
            )


def check_pip(command: list[str], tmp_path: Path) -> None:
    assert command[1:2] == ["install"], f"`{shlex.join(command)}`: only `pip install` lines are checked"
    extras_known = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    specs = [a for a in command[2:] if not a.startswith("-")]
    assert specs, f"`{shlex.join(command)}` installs nothing"
    for spec in specs:
        m = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", spec)
        assert m, f"`{shlex.join(command)}`: {spec} is not this project (add a check for it here)"
        extras = set(m.group(1).split(",")) if m.group(1) else set()
        assert extras <= extras_known, f"`{shlex.join(command)}`: no extra {sorted(extras - extras_known)}"


def check_pytest(command: list[str], tmp_path: Path) -> None:
    """The options parse (pytest exits 4 on a usage error); collecting this one file, deselected."""
    argv = [str(BIN / "pytest"), *command[1:], "--co", "-q", "-p", "no:cacheprovider"]
    proc = run([*argv, "-k", "no_such_test_in_the_readme", __file__])
    assert proc.returncode in (0, 5), f"`{shlex.join(command)}` does not parse:\n{output(proc)}"


def check_tensorboard(command: list[str], tmp_path: Path) -> None:
    exe = shutil.which("tensorboard", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if exe is None:
        pytest.skip("tensorboard is not installed")
    proc = run([exe, "--help"])
    assert proc.returncode == 0, output(proc)
    for arg in command[1:]:
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in proc.stdout, f"`{shlex.join(command)}`: no option {arg}"


def check_script(command: list[str], tmp_path: Path) -> None:
    """A script of the repository's: it exists, is executable and parses."""
    script = ROOT / command[0]
    assert script.is_file() and os.access(script, os.X_OK), f"`{command[0]}` is not an executable file"
    proc = run(["bash", "-n", str(script)])
    assert proc.returncode == 0, output(proc)


CHECKS = {
    "snakemake": check_snakemake,
    "sdpocl": check_sdpocl,
    "pip": check_pip,
    "pytest": check_pytest,
    "tensorboard": check_tensorboard,
    "tests/with_vllm/make_venv.sh": check_script,
    # the vLLM test set's venv (tests/with_vllm/make_venv.sh): its options parse with this venv's pytest
    ".venv-vllm/bin/pytest": check_pytest,
}


def check_command(command: list[str], tmp_path: Path) -> None:
    if command[0] in UNCHECKED:
        return
    assert command[0] in CHECKS, (
        f"the README shows `{shlex.join(command)}`: add a check for `{command[0]}` to tests/test_readme_commands.py"
    )
    CHECKS[command[0]](command, tmp_path)


def readme_commands() -> list[list[str]]:
    """The README's commands, each once."""
    unique: dict[str, list[str]] = {}
    for command in shell_commands(README.read_text()):
        unique.setdefault(shlex.join(command), command)
    return list(unique.values())


# ----------------------------------------------------------------------------------------------
# the README's commands


@pytest.mark.parametrize("command", readme_commands(), ids=shlex.join)
def test_readme_command_runs(command, tmp_path):
    check_command(command, tmp_path)


def test_readme_shows_the_main_commands():
    commands = [shlex.join(c) for c in shell_commands(README.read_text())]
    assert "snakemake --profile profiles/local" in commands, "the default preset's command"
    assert any(c.startswith("snakemake all --profile profiles/slurm --configfile config/paper.yaml") for c in commands)
    assert any(c.startswith("sdpocl preflight") for c in commands)
    assert any(c.startswith("pip install -e '.[test]'") for c in commands)
    assert any(c.startswith("tensorboard --logdir results/tensorboard") for c in commands)


def test_readme_test_command_is_what_ci_runs():
    """The README's test command is `.ci/run`'s first pytest call, less the options CI adds at the end."""
    readme = [c for c in shell_commands(README.read_text()) if c[0] == "pytest"]
    assert readme, "the README shows no test command"
    ci = [shlex.split(line) for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("pytest ")]
    assert ci, ".ci/run runs no pytest"
    assert ci[0][: len(readme[0])] == readme[0], f"README `{shlex.join(readme[0])}` vs .ci/run `{shlex.join(ci[0])}`"


def test_the_checks_fail_on_a_wrong_command(tmp_path):
    text = (
        "```bash\n"
        "snakemake figurez --profile profiles/local   # a misspelt rule\n"
        "sdpocl no-such-command --config config/config.yaml\n"
        "sdpocl preflight --no-such-option config/paper.yaml\n"
        "pip install -e '.[no_such_extra]'\n"
        "pytest --no-such-pytest-option\n"
        "make everything\n"
        "```\n"
    )
    commands = shell_commands(text)
    assert [c[0] for c in commands] == ["snakemake", "sdpocl", "sdpocl", "pip", "pytest", "make"]
    for command in commands:
        with pytest.raises(AssertionError):
            check_command(command, tmp_path)


def test_shell_commands_parser():
    text = (
        "intro `snakemake not-a-block`\n"
        "```bash\n"
        "python3.11 -m venv .venv && . .venv/bin/activate   # set-up\n"
        "snakemake --profile profiles/local --config 'seeds=[0,1,2]' \\\n"
        "    results=r -- a/b.json\n"
        "# a comment line\n"
        "```\n"
        "```text\n"
        "results/   not a command\n"
        "```\n"
    )
    assert shell_commands(text) == [
        ["python3.11", "-m", "venv", ".venv"],
        [".", ".venv/bin/activate"],
        ["snakemake", "--profile", "profiles/local", "--config", "seeds=[0,1,2]", "results=r", "--", "a/b.json"],
    ]
    argv = dry_run_argv(shell_commands(text)[-1], Path("/tmp/x"))
    assert argv[1:] == [
        "--profile",
        "profiles/local",
        "--config",
        "seeds=[0,1,2]",
        "results=/tmp/x",
        "job_server=false",
        "-n",
        *NOLOCK,
        "--",
        "a/b.json",
    ]


# ----------------------------------------------------------------------------------------------
# size and links


def test_readme_is_a_short_manual():
    size = len(README.read_bytes())
    assert size <= MAX_README_BYTES, f"README.md has {size} bytes (at most {MAX_README_BYTES}): move details to docs/"


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors for a Markdown file's headings (lower case, punctuation dropped, spaces to
    hyphens, repeats numbered)."""
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


def relative_links(text: str) -> list[str]:
    """Link and image targets of a Markdown text that are not URLs, outside code."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    return [t for t in targets if not re.match(r"[a-zA-Z][a-zA-Z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", [README, *DOCS, *OTHER_PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    broken = []
    for target in relative_links(page.read_text()):
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file})")
        elif anchor and file.suffix == ".md" and anchor not in heading_anchors(file.read_text()):
            broken.append(f"{target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    assert not broken, f"{page.relative_to(ROOT)}: broken links: {broken}"


def test_link_checker_finds_a_broken_link(tmp_path):
    page = "See [a](docs/no-such-page.md), [b](https://example.org/x), `[c](nowhere.md)` and [d](#top).\n"
    assert relative_links(page) == ["docs/no-such-page.md", "#top"]
    assert heading_anchors("# Top\n## What reruns, when?\n## Top\n") == {"top", "what-reruns-when", "top-1"}
