"""Every complete pipeline example in README.md and docs/*.md loads: a ```yaml block whose document has a top-level
`name:` goes through the config loader and the static checks `ingest onboard --dry-run` makes before it asks Kafka
(`cli.common.load`, then `stream.context.resolve`'s steps before its first request: the former quarantine's place
and both Kafka clients' settings). A block that is partial or wrong on purpose is skipped only when the page says so
right above it, with the reason: `<!-- docs-test: skip (<reason>) -->`. No JVM, no broker."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_YAML_BLOCK = re.compile(r"^```ya?ml[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
_SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*\((?P<reason>[^)]*)\)\s*-->\s*$")
_FILE_COMMENT = re.compile(r"^#\s*(conf/(?:pipelines/[\w.-]+|defaults)\.yaml)\b")
_VARIABLE = re.compile(r"\$\{(\w+)(?::-[^}]*)?\}")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int
    text: str  # the YAML document
    file: str  # where the page says it lives (conf/pipelines/<x>.yaml), else conf/pipelines/<name>.yaml
    defaults: str | None  # the page's conf/defaults.yaml before it, which a file in conf/pipelines/ inherits
    skipped: str | None  # the page's reason for skipping it

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _documents(block: str) -> list[str]:
    return [doc for doc in re.split(r"^---[ \t]*$\n?", block, flags=re.M) if doc.strip()]


def examples() -> list[Example]:
    found = []
    for page in PAGES:
        text = page.read_text()
        defaults: str | None = None
        for match in _YAML_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            skip = _SKIP.search(before)
            for doc in _documents(match.group(1)):
                data = yaml.safe_load(doc)
                named = _FILE_COMMENT.match(doc.lstrip())
                if named and named.group(1) == "conf/defaults.yaml":
                    defaults = doc
                if not isinstance(data, dict) or "name" not in data:
                    continue
                file = named.group(1) if named else f"conf/pipelines/{data['name']}.yaml"
                found.append(Example(page, line, doc, file, defaults if file.startswith("conf/pipelines/") else None,
                                     skip.group("reason").strip() if skip else None))
    return found


EXAMPLES = examples()


def test_the_pages_have_pipeline_examples() -> None:
    """The finder finds them (a change of fence or layout must not turn this test into a test of nothing)."""
    pages = {e.page.name for e in EXAMPLES}
    assert {"README.md", "routing.md", "cdc.md", "configuration.md", "json.md", "protobuf.md"} <= pages
    assert len(EXAMPLES) >= 9


def test_a_skipped_example_says_why() -> None:
    assert [e.id for e in EXAMPLES if e.skipped is not None and not e.skipped] == []


def _placeholder(variable: str) -> str:
    return "http://127.0.0.1:8081" if variable.endswith("URL") else "placeholder"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.id)
def test_every_pipeline_example_passes_onboard_dry_runs_static_checks(example: Example, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    if example.skipped:
        pytest.skip(f"{example.id}: {example.skipped}")
    from ingestion.cli.common import load
    from ingestion.kafka import resolve_settings
    from ingestion.stream.context import check_former_quarantine

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGEST_HOME", str(tmp_path / ".ingest"))
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    monkeypatch.setenv("INGEST_SCHEMAS_DIR", str(tmp_path / "schemas"))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    for text in (example.text, example.defaults or ""):
        for variable in _VARIABLE.findall(text):
            if variable not in os.environ:
                monkeypatch.setenv(variable, _placeholder(variable))
    (tmp_path / "conf" / "pipelines").mkdir(parents=True)
    if example.defaults is not None:
        (tmp_path / "conf" / "defaults.yaml").write_text(example.defaults)
    path = tmp_path / example.file
    path.write_text(example.text)
    config = load(path)  # what `ingest onboard <pipeline> --dry-run` loads: the loader and every check of it
    check_former_quarantine(config)
    resolve_settings(config)
    assert config.name == yaml.safe_load(example.text)["name"]


# --- the README's "A new topic" steps ----------------------------------------------------------------------------

def _readme_new_topic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, catalog_table: str | None) -> list[str]:
    """conf/pipelines/orders.yaml and the copy the README's steps make of it (name, topic, value.subject kept, and
    sink.catalogTable as given, None: left as copied), loaded as `run --all` and `onboard --all` load them."""
    from ingestion.config import load_all

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    folder = tmp_path / "conf" / "pipelines"
    folder.mkdir(parents=True)
    orders = (ROOT / "conf" / "pipelines" / "orders.yaml").read_text()
    (folder / "orders.yaml").write_text(orders)
    data = yaml.safe_load(orders)
    data["name"] = data["topic"] = "payments"
    if catalog_table is not None:
        data["sink"]["catalogTable"] = catalog_table
    (folder / "payments.yaml").write_text(yaml.safe_dump(data))
    configs, errors = load_all()
    return [str(e) for e in errors] if errors else [c.name for c in configs]


def test_the_readmes_new_topic_steps_load_beside_the_demos_pipeline(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "ingest kafka start" in readme.split("A new topic", 1)[1].split("```", 2)[1], \
        "the README's new-topic steps start a broker (make demo stops its own)"
    assert "change `sink.catalogTable` to `bronze.payments` or delete it" in readme
    assert sorted(_readme_new_topic(tmp_path, monkeypatch, catalog_table="bronze.payments")) == ["orders", "payments"]


def test_a_copy_that_keeps_the_catalog_table_is_refused_as_the_readme_says(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    quoted = re.search(r"`\.\.\. (has the same catalog table 'bronze\.orders' as) \.\.\.; (each pipeline needs its "
                       r"own)`", readme)
    assert quoted is not None
    errors = _readme_new_topic(tmp_path, monkeypatch, catalog_table=None)
    assert len(errors) == 1 and quoted.group(1) in errors[0] and errors[0].endswith(quoted.group(2)), errors
