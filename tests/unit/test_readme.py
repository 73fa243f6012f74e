"""The README and docs/ document what the code does: config keys, commands and columns may not drift apart, every
command they show must parse, and every link must lead somewhere."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README_PATH = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README_PATH, *sorted(DOCS.glob("*.md"))]
README = README_PATH.read_text()
MAX_README_LINES = 250

_FENCE = re.compile(r"^```[^\n]*\n.*?^```[ \t]*$", re.M | re.S)
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&"}


def _page(name: str) -> str:
    return (ROOT / name).read_text()


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    following = re.compile(r"\n##+ ").search(text, start + 1)  # up to the next heading of any depth
    return text[start:following.start() if following else len(text)]


def _first_cells(section: str) -> list[str]:
    return [re.split(r"(?<!\\)\|", line)[1] for line in section.splitlines() if line.startswith("| `")]


def _config_keys(cls: type, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = prefix + f.metadata.get("key", f.name)
        optional = [h for h in typing.get_args(hints[f.name]) if dataclasses.is_dataclass(h)]  # `X | None`
        mapping = typing.get_origin(hints[f.name]) in (typing.Mapping, dict) or "Mapping" in str(hints[f.name])
        if mapping:  # settings by name, or sections by name (`routing.silver.<route>`)
            keys.add(key + ".<setting>")
        elif dataclasses.is_dataclass(hints[f.name]) or optional:
            keys |= _config_keys(optional[0] if optional else hints[f.name], key + ".")
        else:
            keys.add(key)
    return keys


def _parser() -> argparse.ArgumentParser:
    from ingestion.cli.parser import build_parser

    return build_parser()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's sub-commands by name ({} when it has none)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _prose(text: str) -> str:
    """The text without its fenced code blocks."""
    return _FENCE.sub("", text)


def _code_blocks(text: str) -> Iterator[str]:
    for block in _FENCE.finditer(text):
        yield block.group(0).split("\n", 1)[1].rsplit("```", 1)[0]


def _ingest_commands(block: str) -> Iterator[tuple[str, list[str]]]:
    """(line, arguments after `ingest`) of every `ingest` command in a code block, shell operators and comments
    understood (`ingest rewind ... && ingest run ...` is two commands)."""
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip().removeprefix("$ ")
        if "ingest" not in line:
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = [*lexer, ";"]
        except ValueError:  # unbalanced quotes: prose in a code block (the package map), unless a command
            if re.match(r"(\S*/)?ingest\s", line):
                raise
            continue
        segment: list[str] = []
        for token in tokens:
            if token not in _SHELL_OPERATORS:
                segment.append(token)
                continue
            if segment and Path(segment[0]).name == "ingest":
                yield line, segment[1:]
            segment = []


def _inline_ingest_usages(text: str) -> list[str]:
    """Every inline code span that starts with `ingest`, outside code blocks."""
    return re.findall(r"(?<!`)`(ingest(?: [^`]*)?)`(?!`)", _prose(text))


# --- the README's commands table, the config reference and the column tables -----------------------------------

def test_every_config_key_is_documented_and_every_documented_key_exists() -> None:
    from ingestion.config import PipelineConfig

    documented = {k for cell in _first_cells(_section(_page("docs/configuration.md"), "Keys"))
                  for k in re.findall(r"`([^`]+)`", cell)}
    documented = {re.sub(r"<[^>]+>", "<setting>", k) for k in documented}
    actual = _config_keys(PipelineConfig)
    # a mapping may be documented as `key` or as `key.<setting>`
    documented |= {f"{k}.<setting>" for k in documented if f"{k}.<setting>" in actual}
    documented -= {k.removesuffix(".<setting>") for k in actual if k.endswith(".<setting>")}
    assert actual - documented == set(), "config keys missing from docs/configuration.md"
    # `extends` is read by the loader before the settings are typed (ingestion/config/loader.py `_with_defaults`)
    assert documented - actual - {"kafka.bootstrap.servers", "extends"} == set(), \
        "docs/configuration.md documents keys that do not exist"


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands = _subparsers(_parser())
    actual = set()
    for name, sub in commands.items():
        nested = _subparsers(sub)
        actual |= {f"{name} {action}" for action in nested} if nested else {name}
    documented = set()
    for cell in _first_cells(_section(README, "Commands")):
        for usage in re.findall(r"`ingest ([a-z][^`]*)`", cell):
            words = usage.split()
            documented.add(" ".join(words[:2]) if " ".join(words[:2]) in actual else words[0])
    for slashed in re.findall(r"`ingest (\w+) (\w+)` / `(\w+)`", _section(README, "Commands")):
        documented.add(f"{slashed[0]} {slashed[2]}")
    assert actual - documented == set(), "commands missing from the README"
    assert documented - actual == set(), "README documents commands that do not exist"


def test_bronze_and_quarantine_column_references_match_the_code() -> None:
    from ingestion.columns import METADATA_COLUMNS, QUARANTINE_COLUMNS

    columns = _page("docs/columns.md")
    bronze = [c for cell in _first_cells(_section(columns, "Bronze columns")) for c in re.findall(r"`([^`]+)`", cell)]
    assert bronze == list(METADATA_COLUMNS)
    quarantine = [c for cell in _first_cells(_section(columns, "Quarantine columns"))
                  for c in re.findall(r"`([^`]+)`", cell)]
    assert quarantine == list(QUARANTINE_COLUMNS)


# --- every page's commands ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_ingest_command_in_a_code_block_parses(page: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    failures = []
    for block in _code_blocks(page.read_text()):
        for line, args in _ingest_commands(block):
            try:
                parser.parse_args(args)
            except SystemExit:
                failures.append(f"{line!r}: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert failures == [], f"{page.name}: commands the `ingest` parser refuses"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_inline_ingest_usage_names_a_command_and_options_that_exist(page: Path) -> None:
    parser = _parser()
    commands = _subparsers(parser)
    global_options = _options(parser)
    failures = []
    for usage in _inline_ingest_usages(page.read_text()):
        words = [w for w in usage.split()[1:] if w not in global_options]
        options = set(re.findall(r"(?<![\w-])--?[a-zA-Z][\w-]*", usage))
        if not words or words[0].startswith(("<", "-", "[")):  # `ingest --help`, `ingest <command> --help`
            unknown = options - global_options
            if words and words[0].startswith("<"):
                unknown = set()
            failures += [f"`{usage}`: unknown option {o}" for o in sorted(unknown)]
            continue
        sub = commands.get(words[0])
        if sub is None:
            failures.append(f"`{usage}`: no command {words[0]!r}")
            continue
        known = global_options | _options(sub)
        nested = _subparsers(sub)
        if nested and len(words) > 1 and not words[1].startswith(("<", "-", "[")):
            for action in words[1].split("|"):
                if action not in nested:
                    failures.append(f"`{usage}`: no command {words[0]} {action!r}")
                else:
                    known |= _options(nested[action])
        elif nested:
            known |= {o for p in nested.values() for o in _options(p)}
        failures += [f"`{usage}`: unknown option {o}" for o in sorted(options - known)]
    assert failures == [], f"{page.name}: `ingest` usages that do not match the command"


# --- size and links -------------------------------------------------------------------------------------------------

def test_the_readme_is_a_short_front_door() -> None:
    lines = len(README.splitlines())
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; move detail into docs/"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", _prose(page.read_text()), re.M):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def _links(text: str) -> list[str]:
    prose = re.sub(r"`[^`\n]*`", "", _prose(text))  # links inside code are not links
    return re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)


def _broken(target: Path, anchor: str, source: str) -> str | None:
    shown = os.path.relpath(target, ROOT)
    if not target.exists():
        return f"{source}: {shown} does not exist"
    if anchor and target.suffix == ".md" and anchor not in _anchors(target):
        return f"{source}: no heading #{anchor} in {shown}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for link in _links(page.read_text()):
        if re.match(r"[a-z][a-z0-9+.-]*:", link):  # https:, mailto:, ...
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        problem = _broken(target, anchor, link)
        if problem:
            broken.append(problem)
    assert broken == [], f"{page.name}: broken links"


def test_docs_links_in_the_code_lead_to_pages_and_headings_that_exist() -> None:
    """Code comments point at docs/<page>.md#<heading> for measured figures and reasons; those must exist."""
    broken = []
    for source in sorted([*(ROOT / "ingestion").rglob("*.py"), *(ROOT / "benchmarks").glob("*.py")]):
        for page, anchor in re.findall(r"\bdocs/([\w.-]+\.md)(?:#([\w-]+))?", source.read_text()):
            problem = _broken(DOCS / page, anchor, f"{source.relative_to(ROOT)}: docs/{page}#{anchor}")
            if problem:
                broken.append(problem)
    assert broken == []


def test_the_documented_unknown_key_messages_are_the_real_ones(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every `unknown key` line README.md and docs/configuration.md show is what loading such a file prints, with
    the whole list of known keys."""
    from ingestion.config import load_pipeline
    from ingestion.errors import ConfigError

    documented = re.compile(r"^error: (conf/pipelines/orders\.yaml): unknown key '([\w.]+)' \(value '(\w+)'\).*$",
                            re.M)
    shown = [m for page in (README_PATH, DOCS / "configuration.md") for m in documented.finditer(page.read_text())]
    assert {m.group(2) for m in shown} == {"source.startingOffset", "topc"}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    for m in shown:
        file = tmp_path / m.group(1)
        file.parent.mkdir(parents=True, exist_ok=True)
        section, _, key = m.group(2).rpartition(".")
        typo = f"{section}:\n  {key}: {m.group(3)}\n" if section else f"{key}: {m.group(3)}\n"
        file.write_text(f"name: orders\n{'topic: orders' + chr(10) if key != 'topc' else ''}"
                        f"kafka:\n  bootstrap.servers: 127.0.0.1:9092\n{typo}")
        with pytest.raises(ConfigError) as caught:
            load_pipeline(file)
        assert f"error: {str(caught.value).replace(f'{tmp_path}/', '')}" == m.group(0)


def test_the_second_writer_statement_of_exactly_once_md_is_what_a_second_writer_gets(tmp_path: Path) -> None:
    """docs/exactly-once.md says a second `ingest run` is refused before its JVM boots, and quotes the error:
    the lock's probe (what `ingest run` asks before a JVM) refuses while another holder has it."""
    from ingestion.stream.lock import PipelineRunning, WriterLock

    page = " ".join((DOCS / "exactly-once.md").read_text().split())
    quoted = re.search(r"`(error: pipeline 'orders' is already running \(pid 4242 on host-a since \S+; lock "
                       r"<checkpoint>/_ingest_writer\.lock\); stop it first, [^`]+)`", page)
    assert quoted is not None
    first = WriterLock("orders", str(tmp_path / "checkpoint"))
    first.acquire()
    try:
        with pytest.raises(PipelineRunning) as caught:
            WriterLock("orders", str(tmp_path / "checkpoint")).probe()
    finally:
        first.release()
    shown = re.sub(r"\(pid \d+ on \S+ since \S+; lock \S+\)", "(pid 4242 on host-a since 2026-11-25T18:00:00+00:00; "
                   "lock <checkpoint>/_ingest_writer.lock)", f"error: {caught.value}")
    assert shown == quoted.group(1)
    WriterLock("orders", str(tmp_path / "checkpoint")).probe()  # released: the next run starts


@pytest.mark.parametrize("argv", [["run"], ["onboard"], ["maintain"], ["sql", "SELECT 1", "--output", "out.txt"],
                                  ["run", "--pipeline-that-is-no-option"]])
def test_bad_usage_exits_2_as_the_readme_says(argv: list[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    assert "Exit codes: 0 success, 1 a failure explained on stderr (`error: ...`), 2 bad usage," in README
    done = subprocess.run([sys.executable, "-m", "ingestion.cli", *argv], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith(("error: ", "ingest: error: ", "ingest run: error: "))
