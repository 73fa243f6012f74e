"""What the docs state as fact, held against the code that makes it so: the Prometheus metric names (both ways), the
exit codes of the `ingest` command, the defaults of the config keys and of the Spark session, the quarantine's
error classes and the package map. No JVM, no broker."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _text(page: Path) -> str:
    return page.read_text()


def _section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    following = re.compile(r"\n## ").search(text, start + 1)
    return text[start:following.start() if following else len(text)]


def _rows(text: str, header: str) -> list[list[str]]:
    """The rows of the Markdown table whose header line starts with `header`, as lists of cells."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]])
    return rows


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# --- Prometheus -------------------------------------------------------------------------------------------------

def _registered() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Every series name the exporter registers, as a scraper sees it (a counter's with `_total`), with its type
    and labels."""
    from ingestion.stream.prometheus import Exporter

    exporter = Exporter()
    found = {}
    for collector in list(exporter.registry._collector_to_names):  # every metric object of the registry
        family = collector.describe()[0]
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = tuple(collector._labelnames)
        if family.type == "stateset":  # prometheus_client's Enum: one label named as the metric, per state
            labels, kind = (*labels, family.name), "enum"
        else:
            kind = family.type
        found[name] = (kind, labels)
    return found


def _metrics_table() -> list[list[str]]:
    return _rows(_section(_text(DOCS / "operations.md"), "Prometheus"), "| metric | type | labels | meaning |")


def test_every_registered_metric_is_in_operations_md_with_its_type_and_labels() -> None:
    registered = _registered()
    documented: dict[str, tuple[str, tuple[str, ...]]] = {}
    for cells in _metrics_table():
        names, kinds = _ticked(cells[0]), [k.strip() for k in cells[1].split(",")]
        labels = tuple(label.strip() for label in cells[2].split(","))
        for i, name in enumerate(names):
            documented[name] = (kinds[min(i, len(kinds) - 1)], labels)
    assert sorted(set(registered) - set(documented)) == [], "metrics missing from operations.md's table"
    assert sorted(set(documented) - set(registered)) == [], "operations.md's table names metrics the code lacks"
    wrong = {n: (documented[n], registered[n]) for n in registered if documented[n] != registered[n]}
    assert wrong == {}, "operations.md's type or labels differ from the code's (documented, code)"


@pytest.mark.parametrize("page", ["README.md", "docs/operations.md", "docs/cdc.md", "docs/routing.md",
                                  "docs/expectations.md"])
def test_every_metric_name_a_page_states_is_registered(page: str) -> None:
    """Each `ingest_...` series a page names (in prose or in a query) is one the exporter registers; a histogram's
    `_bucket`, `_sum` and `_count` are its own."""
    registered = set(_registered())
    histograms = {n for n, (kind, _) in _registered().items() if kind == "histogram"}
    known = registered | {f"{h}_{suffix}" for h in histograms for suffix in ("bucket", "sum", "count")}
    text = _text(ROOT / page)
    # `ingest_main.py` (the packaged job's entry) and `{"ingest_silver": ...}` (silver's ledger key) are no series
    stated = set(re.findall(r"(?<![\w/.-])(ingest_[a-z_]*[a-z])(?![\w.*\"])", text)) - {"ingest_main"}
    assert sorted(stated - known) == [], f"{page} names Prometheus series the code does not register"


def test_silver_metrics_of_cdc_md_are_the_codes() -> None:
    """cdc.md's MLflow names are those `stream.followers.silver_metrics` logs."""
    from ingestion.silver.ledger import SilverRecord
    from ingestion.stream.followers import silver_metrics

    fields = {f.name: 0 for f in dataclasses.fields(SilverRecord)}
    from ingestion.silver.follower import Lag

    logged = set(silver_metrics(SilverRecord(**fields), Lag(0, 0.0)))  # type: ignore[arg-type]
    text = " ".join(_text(DOCS / "cdc.md").split())
    sentence = re.search(r"MLflow logs (.*?) per step", text)
    assert sentence is not None
    assert set(_ticked(sentence.group(1))) == logged


# --- exit codes -------------------------------------------------------------------------------------------------

def _exit_codes() -> set[int]:
    """Every exit code the `ingest` command returns: `return <int>` (or `<int> if ... else <int>`, or a module's
    int constant) in ingestion/cli, and argparse's 2 for bad usage."""
    codes = {2}
    for source in sorted((ROOT / "ingestion" / "cli").rglob("*.py")):
        tree = ast.parse(source.read_text())
        constants = {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name) and isinstance(node.value, ast.Constant)
                     and type(node.value.value) is int}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
            for value in values:
                if isinstance(value, ast.Constant) and type(value.value) is int:
                    codes.add(value.value)
                elif isinstance(value, ast.Name) and value.id in constants:
                    codes.add(constants[value.id])
    return codes


def _stated_codes(sentence: str) -> set[int]:
    return {int(n) for n in re.findall(r"(?<![\w.-])(\d+)(?= (?:success|on|a |bad|\(|interrupted|when))", sentence)}


def test_the_exit_codes_the_readme_states_are_the_commands() -> None:
    text = " ".join(_text(README).split())
    sentence = re.search(r"Exit codes: (.*?\.)(?: |$)", text)
    assert sentence is not None
    assert _stated_codes(sentence.group(1)) == _exit_codes() == {0, 1, 2, 3, 130, 141}


def test_the_exit_codes_operations_md_states_are_the_commands() -> None:
    text = _text(DOCS / "operations.md")
    opening = " ".join(text[:text.index("\n## ")].split())
    sentence = re.search(r"Every command exits (.*?)\.(?: |$)", opening)
    assert sentence is not None
    assert _stated_codes(sentence.group(1)) == _exit_codes()
    assert "`ingest verify` also exits 3" in sentence.group(1)
    verify = " ".join(_section(_text(DOCS / "operations.md"), "Verify").split())
    assert "Exit codes: 0 exact, 1 a violation, 2 a usage error, 3 change records in quarantine." in verify


def test_verify_is_the_only_command_that_exits_3() -> None:
    from ingestion.cli.commands import read_command

    assert read_command.QUARANTINED_CHANGES == 3
    users = [p.name for p in (ROOT / "ingestion" / "cli").rglob("*.py") if "QUARANTINED_CHANGES" in p.read_text()]
    assert users == ["read_command.py"]
    assert "return QUARANTINED_CHANGES" in inspect.getsource(read_command.verify_pipeline)


# --- defaults ---------------------------------------------------------------------------------------------------

def _model_defaults() -> dict[str, Any]:
    """Every config key with a default the model declares (fields of `PipelineConfig`, by their keys)."""
    from ingestion.config import PipelineConfig

    found: dict[str, Any] = {}

    def walk(cls: type, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            key = prefix + f.metadata.get("key", f.name)
            if f.default is not dataclasses.MISSING:
                found[key] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                value = f.default_factory()  # type: ignore[misc]
                if dataclasses.is_dataclass(value):
                    walk(type(value), key + ".")
                else:
                    found[key] = value
    walk(PipelineConfig, "")
    return found


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str) and not value:
        return '""'
    return str(value)


# Defaults configuration.md states that the model leaves empty and the code derives (each checked below).
_DERIVED = {"sink.root", "value.subject", "key.subject", "metrics.experiment", "metrics.consumerGroup",
            "sink.table", "sink.checkpointLocation", "sink.quarantineCatalogTable", "routing.table"}


def test_each_default_configuration_md_states_is_the_models() -> None:
    defaults = _model_defaults()
    table = _rows(_section(_text(DOCS / "configuration.md"), "Keys"), "| key | default |")
    checked, wrong = [], []
    for cells in table:
        keys, stated = _ticked(cells[0]), _ticked(cells[1])
        if len(keys) != 1 or len(stated) != 1 or cells[1] != f"`{stated[0]}`" or keys[0] in _DERIVED:
            continue  # several keys, a default in words, or one the code derives
        key = keys[0]
        if key not in defaults:
            continue  # a key of the routing or silver sections, whose defaults live in their own tables
        checked.append(key)
        if stated[0] != _shown(defaults[key]):
            wrong.append((key, stated[0], _shown(defaults[key])))
    assert wrong == [], "configuration.md's defaults differ from the model's (key, documented, code)"
    assert len(checked) >= 20, checked  # the table's single-literal defaults are all read


def test_the_derived_defaults_configuration_md_states_are_the_codes(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from ingestion.config import parse_pipeline

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("INGEST_HOME", raising=False)
    table = {_ticked(cells[0])[0]: cells[1] for cells in
             _rows(_section(_text(DOCS / "configuration.md"), "Keys"), "| key | default |") if cells[0].count("`") == 2}
    config = parse_pipeline({"name": "orders", "topic": "orders", "key": {"format": "avro"},
                             "sink": {"catalogTable": "bronze.orders"}}, tmp_path / "orders.yaml")
    state = (tmp_path / ".ingest").as_posix()
    assert table["sink.root"] == "`.ingest`"
    assert config.table_path == f"{state}/tables/orders" and table["sink.table"] == "`<root>/tables/<name>`"
    assert config.checkpoint_path == f"{state}/checkpoints/orders"
    assert table["sink.checkpointLocation"] == "`<root>/checkpoints/<name>`"
    assert config.value.subject == "orders-value" and table["value.subject"] == "`<topic>-value`"
    assert config.key.subject == "orders-key" and table["key.subject"] == "`<topic>-key`"
    assert config.experiment == "ingest/orders" and table["metrics.experiment"] == "`ingest/<name>`"
    assert config.consumer_group == "ingest-orders" and table["metrics.consumerGroup"] == "`ingest-<name>`"
    assert config.catalog_names == ("bronze.orders", "bronze.orders_quarantine")
    assert table["sink.quarantineCatalogTable"] == "`<catalogTable>_quarantine`"
    from ingestion.config.model import RoutingOptions

    assert RoutingOptions(by="topic").table == "{pipeline}_{route}" and table["routing.table"] == "`{pipeline}_{route}`"


def test_the_duration_keys_configuration_md_lists_are_every_duration_key() -> None:
    """`Every duration key (...)`: the keys checks.py parses as durations (`duration_seconds`), by the key its
    message names."""
    source = (ROOT / "ingestion" / "config" / "checks.py").read_text()
    parsed = set(re.findall(r"key '([\w.]+)' must be a (?:positive )?(?:duration|interval)", source))
    parsed |= {"maintenance.vacuumRetention"}  # parsed by retention.problems, which checks.check_retention calls
    text = " ".join(_text(DOCS / "configuration.md").split())
    sentence = re.search(r"Every duration key \((.*?)\) takes", text)
    assert sentence is not None
    listed = set(_ticked(sentence.group(1)))
    assert parsed <= listed and listed - parsed <= {"routing.silver.<route>.trigger"}, (parsed, listed)
    assert "silver.trigger" in parsed  # a route's silver is checked as a silver (checks._check_routing)


def test_key_format_values_of_configuration_md_are_the_models() -> None:
    import typing

    from ingestion.config.model import KeyFormat

    allowed = set(typing.get_args(typing.get_type_hints(KeyFormat)["format"]))
    row = next(cells for cells in _rows(_section(_text(DOCS / "configuration.md"), "Keys"), "| key | default |")
               if _ticked(cells[0]) == ["key.format"])
    stated = {v for v in _ticked(row[2]) if v in allowed or re.fullmatch(r"[a-z]+", v)}
    assert allowed <= stated, f"key.format values missing from configuration.md: {allowed - stated}"


def test_the_spark_defaults_configuration_md_lists_are_the_session_factorys() -> None:
    from ingestion.runtime import session

    section = _section(_text(DOCS / "configuration.md"), "The `spark:` section")
    documented: dict[str, str] = {}
    for header in ("| setting | value | why |",):
        start = 0
        while (at := section.find(header, start)) >= 0:
            for cells in _rows(section[at:], header):
                for key in _ticked(cells[0]):
                    documented.setdefault(key, cells[1])
            start = at + 1
    code = {**session.DEFAULTS, **session.LOCAL_DEFAULTS}
    assert sorted(set(code) - set(documented)) == [], "Spark defaults missing from configuration.md"
    wrong = [(k, documented[k], v) for k, v in code.items()
             if documented[k].startswith("`") and documented[k].count("`") == 2 and documented[k] != f"`{v}`"]
    assert wrong == [], "configuration.md's Spark defaults differ from session.py's"
    factory = inspect.getsource(session)
    unknown = [k for k in documented if f'"{k}"' not in factory and k not in (session.SNAPSHOT_PARTITIONS,
                                                                               session.CHECKPOINT_MANAGER)]
    assert unknown == [], "configuration.md lists Spark settings session.py does not set"


# --- error classes ----------------------------------------------------------------------------------------------

_FAULT_MODULES = ["ingestion.decode.spec", "ingestion.decode.wire", "ingestion.decode.validate",
                  "ingestion.decode.protobuf_check", "ingestion.decode.protobuf_decoder",
                  "ingestion.decode.json_decoder", "ingestion.schema.json_values"]


# Base classes no decoder raises as such (json_values raises their subclasses), so no row carries their name.
_BASES = {"InvalidJsonError"}


def _error_classes() -> set[str]:
    """Every `_error_class` the code writes: the decoders' fault classes, the named ones (route, expectation,
    Arrow), and fastavro's resolution error."""
    from ingestion.decode import expectations, routes
    from ingestion.errors import IngestionError

    found = {"ArrowConversionError", "SchemaResolutionError", routes.ROUTE_ERROR, expectations.EXPECTATION_FAILED}
    for name in _FAULT_MODULES:
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and issubclass(cls, Exception) and cls.__module__ == name \
                    and not issubclass(cls, IngestionError) and not cls.__name__.startswith("_") \
                    and cls.__name__ not in _BASES:
                found.add(cls.__name__)
    return found


def test_every_error_class_is_in_columns_md() -> None:
    from fastavro.read import SchemaResolutionError  # what fastavro raises for a writer the reader cannot read

    assert SchemaResolutionError.__name__ == "SchemaResolutionError"
    table = _rows(_text(DOCS / "columns.md"), "| error class | the record |")
    documented = {name for cells in table for name in _ticked(cells[0])}
    assert sorted(_error_classes() - documented) == [], "error classes missing from columns.md"
    assert sorted(documented - _error_classes()) == [], "columns.md lists error classes the code does not write"


# --- the package map --------------------------------------------------------------------------------------------

def test_every_module_is_in_architecture_mds_package_map() -> None:
    text = _text(DOCS / "architecture.md")
    block = text[text.index("```\ningestion/\n"):]
    block = block[:block.index("\n```\n")]
    listed: set[str] = set()
    folders: list[tuple[int, str]] = []
    for line in block.splitlines()[2:]:  # after ``` and ingestion/
        name = line.split()[0]
        depth = (len(line) - len(line.lstrip())) // 2
        folders = [(d, f) for d, f in folders if d < depth]
        path = "/".join([f for _, f in folders] + [name.rstrip("/")])
        if name.endswith("/"):
            folders.append((depth, name.rstrip("/")))
        listed.add(path)
    modules = {str(p.relative_to(ROOT / "ingestion")) for p in (ROOT / "ingestion").rglob("*.py")
               if not {"demo_project", "template"} & set(p.parts)}
    expected = {m for m in modules if not m.endswith("/__init__.py")} | {"__init__.py", "cli/__init__.py"}
    expected |= {str(Path(m).parent) for m in modules if m.endswith("/__init__.py")}
    assert sorted(expected - listed) == [], "modules missing from architecture.md's package map"
    assert sorted(listed - expected) == [], "architecture.md's package map lists modules that do not exist"
    pieces = sorted(p.stem for p in (ROOT / "ingestion" / "runtime" / "data").glob("*.java"))
    jar = " ".join(text[text.index("The helper jar (`ingest jars`"):].split("\n\n")[0].split())
    count = {6: "six", 7: "seven", 8: "eight", 9: "nine"}[len(pieces)]
    assert f"holds {count} JVM pieces" in jar and all(f"`{p}`" in jar for p in pieces), pieces
