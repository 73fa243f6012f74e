"""Pipeline files to configs: YAML read, the defaults file inherited (`extends`, conf/defaults.yaml), `${VAR}` and
`${VAR:-default}` replaced from the environment, deprecated key spellings renamed with a warning; then the values
typed (`coerce`), the topics normalized and the config checked (`checks`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from ingestion import storage
from ingestion.config import checks, coerce
from ingestion.config.model import PipelineConfig
from ingestion.errors import ConfigError
from ingestion.paths import conf_dir

# The package's logger, as before the split into modules: the name on the CLI's log lines stays the same.
log = logging.getLogger("ingestion.config")

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def no_pipelines() -> str:
    """What to say where the pipelines folder holds no pipeline file, and what writes one."""
    return (f"no pipeline files in {conf_dir() / 'pipelines'}; `ingest init <topic>` writes one from what the broker "
            "knows, `ingest new <folder>` lays out a project")


def load_pipeline(name_or_path: str | Path) -> PipelineConfig:
    """Load `conf/pipelines/<name>.yaml`, or the YAML file at the given path."""
    path = given = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = conf_dir() / "pipelines" / f"{name_or_path}.yaml"
        if not path.is_file() and given.is_file():
            raise ConfigError(f"{given} is no pipeline file: give a .yaml file, or a pipeline's name (its file in "
                              f"{conf_dir() / 'pipelines'})")
    if not path.is_file() and given.suffix not in (".yaml", ".yml"):
        path = next(iter(_named(str(name_or_path))), path)  # a file whose `name:` is not its file's name
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in (conf_dir() / "pipelines").glob("*.yaml")))
        raise ConfigError(f"no pipeline config {str(name_or_path)!r}: {path} does not exist ("
                          + (f"known: {known})" if known else f"{no_pipelines()})"))
    own = _read(path)
    try:
        return parse_pipeline(_with_defaults(dict(own), path), path)
    except ConfigError as exc:
        raise _blamed(exc, path, own) from None


def _named(name: str) -> list[Path]:
    """The files of conf/pipelines/ whose `name:` is `name` (a file that does not load is passed over)."""
    found = []
    for file in sorted((conf_dir() / "pipelines").glob("*.yaml")):
        try:
            data = yaml.safe_load(file.read_text())
        except (yaml.YAMLError, OSError):
            continue
        if isinstance(data, dict) and data.get("name") == name:
            found.append(file)
    return found if len(found) == 1 else []


def inherited(data: dict[str, Any], path: Path) -> PipelineConfig:
    """The config a file at `path` holding `data` would load as, with the defaults it would inherit."""
    return parse_pipeline(_with_defaults(dict(data), path), path)


DEFAULTS_FILE = "defaults.yaml"
_PER_PIPELINE = ("name", "topic", "topics", "topicPattern")  # what a defaults file cannot hold


def _read(path: Path) -> dict[str, Any]:
    try:
        data = _load_yaml(path.read_text(), path)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: {_yaml_problem(exc)}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    if data is None:
        raise ConfigError(f"{path}: is empty: expected a mapping of settings at the top level")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of settings at the top level, got {data!r}")
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML parser's error in one line: where (line and column, counted from 1), what, and what it was reading."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return "not valid YAML: " + " ".join(str(exc).split())
    mark, problem = exc.problem_mark, str(exc.problem or "")
    if "'\\t'" in problem:
        problem += " (a tab: YAML indents with spaces)"
    context, at = (f", {exc.context}" if exc.context else ""), exc.context_mark
    if context and at is not None:
        context += f" at line {at.line + 1}, column {at.column + 1}"
    return f"line {mark.line + 1}, column {mark.column + 1}: not valid YAML: {problem}{context}"


def _load_yaml(text: str, path: Path) -> Any:
    """The YAML document of `text`, with a warning for each key a mapping gives twice: YAML loaders keep the last
    one without a word, so a second `sink:` section drops the first one's table and checkpoint. (Files made by
    appending a section to override one, as generated files may be, keep loading as they did.)"""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        for name, first, second in _repeated_keys(node, "", set()):
            log.warning("%s: key %r is given twice (lines %d and %d); the second wins and what the first set is "
                        "dropped: give it once", path, name, first, second)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _repeated_keys(node: yaml.Node, where: str, visited: set[int]) -> Iterator[tuple[str, int, int]]:
    """(dotted key, its first line, the line repeating it) for each key a mapping below `node` holds twice, YAML's
    merge key `<<` aside: the keys beside it override what it merges, as YAML means them to."""
    if id(node) in visited:  # an alias of a node already walked
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                yield from _repeated_keys(value_node, where, visited)
                continue
            name = f"{where}.{key_node.value}" if where else str(key_node.value)
            line = key_node.start_mark.line + 1
            key = (key_node.tag, key_node.value)
            if key in first:
                yield name, first[key], line
            first.setdefault(key, line)
            yield from _repeated_keys(value_node, name, visited)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _repeated_keys(item, f"{where}[{index}]", visited)


def _with_defaults(data: dict[str, Any], path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The file's settings over those of the file it extends: `extends: <path>` (relative to the file), or, for a
    file in conf/pipelines/ without that key, conf/defaults.yaml when it exists (`extends: null` opts out).
    A defaults file is checked on its own first, so a bad key in it is reported with its file's name."""
    data = _renamed(data, path)
    parent = _parent(data, path)
    data.pop("extends", None)
    if parent is None:
        return data
    if parent in seen or parent == path.resolve():
        raise ConfigError(f"{path}: 'extends' goes round in a circle through {parent}")
    defaults = _with_defaults(_read(parent), parent, (*seen, path.resolve()))
    for key in _PER_PIPELINE:
        if key in defaults:
            raise ConfigError(f"{parent}: key {key!r} belongs in each pipeline's file, not in shared defaults "
                              f"(value {coerce.shown(key, defaults[key])})")
    coerce.build(PipelineConfig, _interpolate(defaults, parent, ""), parent, "", partial=True)
    return _merged(_without_start(defaults, data), data)


def _parent(data: Mapping[str, Any], path: Path) -> Path | None:
    """The defaults file the file at `path` holding `data` extends, None for none."""
    if "extends" in data:
        parent_name = data["extends"]
        if parent_name is None:
            return None
        if not isinstance(parent_name, str):
            raise ConfigError(f"{path}: key 'extends' must be the path of a defaults file, got {parent_name!r}")
        parent = (path.parent / parent_name).resolve()
        if not parent.is_file():
            raise ConfigError(f"{path}: key 'extends' names {parent_name!r}, but {parent} does not exist")
        return parent
    parent = conf_dir() / DEFAULTS_FILE
    if path.resolve().parent != (conf_dir() / "pipelines").resolve() or not parent.is_file():
        return None
    return parent


_KEY = re.compile(r" key '([A-Za-z]+)(?:\[\d+\])?(?:\.([^']+))?'")  # the key an error names: `sink.trigger`


def _blamed(exc: ConfigError, path: Path, own: Mapping[str, Any]) -> ConfigError:
    """An error of the merged settings, naming the defaults file where the key it names comes from there (the
    pipeline's file does not give it): the line to fix is in that file, not in the pipeline's."""
    text = str(exc)
    found = _KEY.search(text)
    if not text.startswith(f"{path}: ") or found is None:
        return exc
    section, rest = found.group(1), found.group(2)
    given = own.get(section)
    if section in own and not (rest and isinstance(given, dict) and
                               not any(rest == k or rest.startswith(f"{k}.") for k in given)):
        return exc
    parent = _parent(own, path)
    if parent is None:
        return exc
    return ConfigError(f"{parent}: {text.removeprefix(f'{path}: ')} (inherited by {path})")


# The three ways to say where a new pipeline starts are one setting: a file that gives any of them replaces the
# start its defaults give (else `startingOffsets: earliest` in conf/defaults.yaml would contradict every file's
# `startingTimestamp`).
START_KEYS = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp")


def _without_start(defaults: dict[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    source, inherited = data.get("source"), defaults.get("source")
    if not isinstance(source, dict) or not isinstance(inherited, dict) or not set(source) & set(START_KEYS):
        return defaults
    return {**defaults, "source": {k: v for k, v in inherited.items() if k not in START_KEYS}}


def _merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`over` on top of `base`, mapping by mapping; any other value (lists too) is replaced whole."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def list_pipelines() -> list[Path]:
    return sorted((conf_dir() / "pipelines").glob("*.yaml"))


def load_all(paths: list[Path] | None = None) -> tuple[list[PipelineConfig], list[ConfigError]]:
    """Every pipeline file (default: conf/pipelines/*.yaml): the valid configs, and one error per bad file. Two
    files that share what each needs of its own (`_owned`: the name, a table's location or catalog name, the
    checkpoint) are both bad: one error for the later file, naming the earlier."""
    configs: list[PipelineConfig] = []
    errors: list[ConfigError] = []
    for path in list_pipelines() if paths is None else paths:
        try:
            configs.append(load_pipeline(path))
        except ConfigError as exc:
            errors.append(exc)
    clashing: set[Path] = set()
    owners: _Owners = {}
    for config in configs:
        owned = _owned(config)
        found = list(_clashes(owned, owners))
        if found:
            errors.append(_clash(config, owned, owners, found[0]))
            clashing |= {config.file, *(owners[theirs][0].file for _, theirs, _ in found)}
        _own(owners, config, owned)
    return [c for c in configs if c.file not in clashing], errors


# (space, normalized value) -> the pipeline that has it, and what it is to that pipeline (`_owned`)
_Owners = dict[tuple[str, str], tuple[PipelineConfig, str]]
_Owned = dict[tuple[str, str], tuple[str, str]]
_Clash = tuple[tuple[str, str], tuple[str, str], str]  # (own thing, another's thing, `storage.nesting`)


def _own(owners: _Owners, config: PipelineConfig, owned: _Owned) -> None:
    for thing, (what, _) in owned.items():
        owners.setdefault(thing, (config, what))


def _clashes(owned: _Owned, owners: Mapping[tuple[str, str], object]) -> Iterator[_Clash]:
    """Each of `owned` that one of `owners` has too: the same name, or a location equal to, inside or holding
    another's (a table in a table's folder, a checkpoint in a table: one would hold the other's files)."""
    for thing in owned:
        for theirs in owners:
            if thing == theirs:
                yield thing, theirs, "same"
            elif thing[0] == theirs[0] == "location" and (how := storage.nesting(thing[1], theirs[1])):
                yield thing, theirs, how


def _owned(config: PipelineConfig) -> _Owned:
    """What a pipeline needs of its own, as (space, normalized value) -> (what it is to the pipeline, value): its
    name, the locations of its tables (bronze, quarantine, silver) and checkpoint (`storage.location_key`), and its
    tables' catalog names. Two pipelines sharing one would write over each other's tables or progress; a pipeline
    whose own locations overlap is refused at load (`checks`)."""
    found: _Owned = {}
    for space, what, value in (
            ("name", "name", config.name),
            ("location", "table", config.table_path), ("location", "quarantine table", config.quarantine_path),
            ("location", "silver table", config.silver_path), ("location", "checkpoint", config.checkpoint_path),
            ("catalog", "catalog table", (config.catalog_names or ("", ""))[0]),
            ("catalog", "quarantine catalog table", (config.catalog_names or ("", ""))[1]),
            ("catalog", "silver catalog table", config.silver.catalog_table if config.silver else "")):
        if value:
            found.setdefault((space, storage.location_key(value) if space == "location" else value), (what, value))
    return found


def _clash(config: PipelineConfig, owned: _Owned, owners: _Owners, clash: _Clash) -> ConfigError:
    thing, theirs, how = clash
    (what, value), (other, their_what) = owned[thing], owners[theirs]
    where = {"same": "which is", "inside": "which is inside", "holds": "which holds"}[how]
    same = (f"has the same {what} {value!r} as {other.file}" if what == their_what and how == "same" else
            f"has {value!r} as its {what}, {where} the {their_what} of {other.file}")
    return ConfigError(f"{config.file}: pipeline {config.name!r} {same}; each pipeline needs its own")


def check_siblings(config: PipelineConfig) -> PipelineConfig:
    """`config`, when it shares nothing it needs of its own (`_owned`) with another file of conf/pipelines/ (where
    it is one of them, a link there included), as `load_all` refuses for `--all`; else a ConfigError naming both
    files (a copied file whose `sink.catalogTable` was left as it was, say). A sibling that does not load is not
    compared, and its own warnings are not repeated."""
    here = Path(os.path.abspath(config.file))
    if here.parent != Path(os.path.abspath(conf_dir() / "pipelines")):
        return config
    owners: _Owners = {}
    for path in list_pipelines():
        if Path(os.path.abspath(path)) == here:
            continue
        was, log.disabled = log.disabled, True
        try:
            other = load_pipeline(path)
        except ConfigError:
            continue
        finally:
            log.disabled = was
        _own(owners, other, _owned(other))
    owned = _owned(config)
    if (found := next(_clashes(owned, owners), None)) is not None:
        raise _clash(config, owned, owners, found)
    return config


# Keys renamed to camelCase: (section, old spelling) -> new spelling; the old one is read with a warning.
DEPRECATED_KEYS = {("sink", "on_error"): "onError"}


def _renamed(data: dict[str, Any], file: Path) -> dict[str, Any]:
    """`data` with deprecated spellings of keys replaced by the current ones, each with one warning line."""
    out = dict(data)
    for (section, old), new in DEPRECATED_KEYS.items():
        given = out.get(section)
        if not isinstance(given, dict) or old not in given:
            continue
        if new in given:
            raise ConfigError(f"{file}: keys '{section}.{old}' and '{section}.{new}' are the same setting; keep "
                              f"'{section}.{new}'")
        log.warning("%s: key '%s.%s' is deprecated; write '%s.%s'", file, section, old, section, new)
        out[section] = {(new if k == old else k): v for k, v in given.items()}
    return out


def parse_pipeline(data: object, file: Path) -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: expected a mapping of settings at the top level, got {data!r}")
    data = _renamed(data, file)
    data = {**data, "silver": _key_list(data.get("silver"))} if "silver" in data else data
    routing = data.get("routing")
    if isinstance(routing, dict) and isinstance(routing.get("silver"), dict):
        data = {**data, "routing": {**routing, "silver": {k: _key_list(v) for k, v in routing["silver"].items()}}}
    config = coerce.build(PipelineConfig, _interpolate(data, file, ""), file, "")
    config = dataclasses.replace(config, file=file, **checks.topics(config, file))
    if config.topic and (config.routing is None or config.routing.by != "recordName"):
        # One topic: one subject, by the strategy unless named (TopicNameStrategy: <topic>-value, <topic>-key);
        # routed by record name, a subject per record type (`PipelineConfig.routed`).
        config = dataclasses.replace(config, value=dataclasses.replace(
            config.value, subject=config.value.subject_for(config.topic)))
        if config.key.format in ("avro", "protobuf"):
            config = dataclasses.replace(config, key=dataclasses.replace(
                config.key, subject=config.key.subject_for(config.topic)))
    source = data.get("source")
    checks.check(config, set(source) if isinstance(source, dict) else set())
    return config


def _key_list(silver: Any) -> Any:
    """A `silver:` section's `key: id` as `key: [id]`."""
    if isinstance(silver, dict) and isinstance(silver.get("key"), str):
        return {**silver, "key": [silver["key"]]}
    return silver


def _interpolate(value: Any, file: Path, where: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, file, f"{where}{k}.") for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, file, where) for v in value]
    if not isinstance(value, str):
        return value

    def sub(match: re.Match[str]) -> str:
        var, default = match.group(1), match.group(2)
        if os.environ.get(var):
            return os.environ[var]
        if default is not None:  # as in the shell, ${VAR:-x} also falls back when VAR is set but empty
            return default
        if var in os.environ:
            return ""
        raise ConfigError(f"{file}: key {where.rstrip('.')!r} uses ${{{var}}}, which is not set in the environment")

    text = _ENV.sub(sub, value)
    if _ENV.fullmatch(value):
        # A value that is only `${VAR}` gets the type YAML would give the text (`${N}` -> 500 for N=500).
        typed = yaml.safe_load(text) if text else text
        return typed if isinstance(typed, (int, float, bool)) else text
    return text
