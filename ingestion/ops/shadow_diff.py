"""`ingest shadow diff`: a shadow against the live table over the same Kafka offsets, record by record by (topic,
partition, offset), without a JVM: the four tables' rows of the shadow's spans read with delta-rs
(`delta/shadow_tables.py`), compared in DuckDB.

It says: records only in the live tables or only in the shadow's, records that moved from bronze to quarantine
or back, records quarantined in both whose error class changed, and per column of bronze the number of records
whose value changed (a column only one side has counts where the other side's value is not null), with up to
`SAMPLES` sample offsets each. Ingestion-time columns (`IGNORED`) are not compared.

A routed pipeline's: every route table of both sides (and the two quarantines), so also the records that move from
one route table to another (`moved_tables`, and per pair of tables in `moves`); the columns are compared per route
table both sides have (`<table>.<column>`), and `tables` gives each route table's rows on both sides.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ingestion.config import PipelineConfig
from ingestion.delta import routed, shadow_tables
from ingestion.ops import shadow as shadows

SAMPLES = 3
IGNORED = frozenset({"_ingested_at", "_batch_id"})
KEY = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


@dataclass(frozen=True)
class Moved:
    count: int
    samples: list[list[Any]]  # [topic, partition, offset]


@dataclass
class Diff:
    pipeline: str
    shadow: str
    versions: tuple[int, int]
    spans: list[str]
    live_rows: int
    live_quarantined: int
    shadow_rows: int
    shadow_quarantined: int
    only_live: Moved
    only_shadow: Moved
    to_quarantine: Moved  # in live bronze, in the shadow's quarantine
    from_quarantine: Moved  # in live quarantine, in the shadow's bronze
    error_changed: Moved  # quarantined in both, another error class
    columns: dict[str, Moved] = field(default_factory=dict)  # changed values per bronze column (changed ones only)
    added_columns: list[str] = field(default_factory=list)  # the shadow's bronze columns live lacks
    removed_columns: list[str] = field(default_factory=list)
    # a routed pipeline's: records in another route table in the shadow, by "<live table> -> <shadow's table>"
    moved_tables: Moved = field(default_factory=lambda: Moved(0, []))
    moves: dict[str, int] = field(default_factory=dict)
    tables: dict[str, list[int]] = field(default_factory=dict)  # route table -> [live rows, shadow rows]
    times: list[str] | None = None  # a routed pipeline's range

    @property
    def same(self) -> bool:
        return not (self.only_live.count or self.only_shadow.count or self.to_quarantine.count
                    or self.from_quarantine.count or self.error_changed.count or self.columns
                    or self.moved_tables.count)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["versions"] = list(self.versions)
        body["same"] = self.same
        return body


def diff(config: PipelineConfig, name: str) -> Diff:
    shadow = shadows.get(config, name)
    if shadow.state == shadows.STARTING:
        raise shadows.ShadowError(f"shadow {name!r} of {config.name} is not complete: rerun `ingest shadow start`")
    spans = [s.as_tuple() for s in shadow.spans]
    options = config.storage_options() or None

    def rows(path: str) -> Any:
        return shadow_tables.rows_in_spans(path, spans, options)

    if shadow.routed:
        live = {table: rows(path) for table, path in routed.route_tables(config).items()}
        mine = {table: rows(path) for table, path in shadow.routes.items()}
        d = compare_tables(config.name, name, shadow.versions, [str(s) for s in shadow.spans], live, mine,
                           rows(config.quarantine_path), rows(shadow.quarantine), routed=True)
        d.times = None if shadow.times is None else list(shadow.times)
        return d
    tables = {"lb": config.table_path, "lq": config.quarantine_path, "sb": shadow.table, "sq": shadow.quarantine}
    found = {alias: rows(path) for alias, path in tables.items()}
    return compare(config.name, name, shadow.versions, [str(s) for s in shadow.spans], found)


def compare(pipeline: str, name: str, versions: tuple[int, int], spans: list[str], found: Mapping[str, Any]) -> Diff:
    """The comparison of the four tables' rows (pyarrow Tables, None for a table that does not exist): `lb`, `lq`
    live bronze and quarantine, `sb`, `sq` the shadow's."""
    return compare_tables(pipeline, name, versions, spans, {"bronze": found.get("lb")}, {"bronze": found.get("sb")},
                          found.get("lq"), found.get("sq"))


def compare_tables(pipeline: str, name: str, versions: tuple[int, int], spans: list[str], live: Mapping[str, Any],
                   shadow: Mapping[str, Any], live_q: Any, shadow_q: Any, *, routed: bool = False) -> Diff:
    """The comparison of both sides' rows (pyarrow Tables, None for a table that does not exist): `live` and
    `shadow` their bronze tables by name (a routed pipeline's route tables, by the live table's name), `live_q`,
    `shadow_q` their quarantines. `routed`: column names qualified by their table."""
    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    try:
        empty_key = pa.table({"_kafka_topic": pa.array([], pa.string()), "_kafka_partition": pa.array([], pa.int32()),
                              "_kafka_offset": pa.array([], pa.int64()), "_error_class": pa.array([], pa.string())})
        key = ", ".join(KEY)
        con.register("lq", live_q if live_q is not None else empty_key)
        con.register("sq", shadow_q if shadow_q is not None else empty_key)
        aliases: dict[tuple[str, str], str] = {}
        for side, tables in (("l", live), ("s", shadow)):
            parts = []
            for n, (table, rows) in enumerate(sorted(tables.items())):
                if rows is None:
                    continue
                alias = aliases[(side, table)] = f"{side}b{n}"
                con.register(alias, rows)
                parts.append(f"SELECT {key}, '{table.replace(chr(39), chr(39) * 2)}' AS _table FROM {alias}")
            con.register(f"{side}_empty", empty_key)
            union = " UNION ALL ".join(parts) or f"SELECT {key}, '' AS _table FROM {side}_empty"
            con.execute(f"CREATE TEMP VIEW {side}b AS {union}")

        def count(alias: str) -> int:
            row = con.execute(f"SELECT count(*) FROM {alias}").fetchone()
            return int(row[0]) if row else 0

        def moved(query: str) -> Moved:
            row = con.execute(f"SELECT count(*) FROM ({query})").fetchone()
            samples = con.execute(f"SELECT {key} FROM ({query}) ORDER BY {key} LIMIT {SAMPLES}").fetchall()
            return Moved(int(row[0]) if row else 0, [list(s) for s in samples])

        live_all = f"SELECT {key} FROM lb UNION ALL SELECT {key} FROM lq"
        shadow_all = f"SELECT {key} FROM sb UNION ALL SELECT {key} FROM sq"
        only_live = moved(f"SELECT {key} FROM ({live_all}) EXCEPT SELECT {key} FROM ({shadow_all})")
        only_shadow = moved(f"SELECT {key} FROM ({shadow_all}) EXCEPT SELECT {key} FROM ({live_all})")
        to_q = moved(f"SELECT {key} FROM lb INTERSECT SELECT {key} FROM sq")
        from_q = moved(f"SELECT {key} FROM lq INTERSECT SELECT {key} FROM sb")
        joined = " AND ".join(f"a.{k} = b.{k}" for k in KEY)
        error_changed = moved(f"SELECT a.{KEY[0]}, a.{KEY[1]}, a.{KEY[2]} FROM lq a JOIN sq b ON {joined} "
                              "WHERE a._error_class IS DISTINCT FROM b._error_class")
        between = f"FROM lb a JOIN sb b ON {joined} WHERE a._table <> b._table"
        moved_tables = moved(f"SELECT a.{KEY[0]}, a.{KEY[1]}, a.{KEY[2]} {between}")
        moves = {f"{a} -> {b}": int(n) for a, b, n in con.execute(
            f"SELECT a._table, b._table, count(*) {between} GROUP BY 1, 2 ORDER BY 1, 2").fetchall()}
        columns: dict[str, Moved] = {}
        added: list[str] = []
        removed: list[str] = []
        for table in sorted(set(live) & set(shadow)):
            a_alias, b_alias = aliases.get(("l", table)), aliases.get(("s", table))
            if a_alias is None or b_alias is None:
                continue
            live_columns, shadow_columns = _names(live[table]), _names(shadow[table])
            named = (lambda c, table=table: f"{table}.{c}") if routed else (lambda c: c)
            added += [named(c) for c in shadow_columns if c not in live_columns]
            removed += [named(c) for c in live_columns if c not in shadow_columns]
            for column in [c for c in shadow_columns if c not in IGNORED and c not in KEY] + \
                          [c for c in live_columns if c not in shadow_columns and c not in IGNORED and c not in KEY]:
                quoted = '"' + column.replace('"', '""') + '"'
                if column in live_columns and column in shadow_columns:
                    changed = f"a.{quoted} IS DISTINCT FROM b.{quoted}"
                else:
                    changed = f"{'b' if column in shadow_columns else 'a'}.{quoted} IS NOT NULL"
                found_moved = moved(f"SELECT a.{KEY[0]}, a.{KEY[1]}, a.{KEY[2]} FROM {a_alias} a JOIN {b_alias} b "
                                    f"ON {joined} WHERE {changed}")
                if found_moved.count:
                    columns[named(column)] = found_moved
        per_table = {}
        if routed:
            for table in sorted(set(live) | set(shadow)):
                counts = [count(aliases[(side, table)]) if (side, table) in aliases else 0 for side in ("l", "s")]
                if any(counts):
                    per_table[table] = counts
        return Diff(pipeline, name, versions, spans, count("lb"), count("lq"), count("sb"), count("sq"),
                    only_live, only_shadow, to_q, from_q, error_changed, columns, added, removed, moved_tables,
                    moves, per_table)
    finally:
        con.close()


def _names(table: Any) -> list[str]:
    return [] if table is None else list(table.column_names)


def render(d: Diff) -> str:
    def line(what: str, m: Moved) -> str:
        shown = ", ".join(f"{t}/{p}:{o}" for t, p, o in m.samples)
        return f"  {what}: {m.count}" + (f" (e.g. {shown})" if m.count else "")

    covers = (f"versions {d.versions[0]}-{d.versions[1]}" if d.times is None else
              f"the batches committed from {d.times[0]}" + (f" to {d.times[1]}" if d.times[1] else ""))
    lines = [f"shadow {d.shadow} of {d.pipeline} against live, {covers} ({', '.join(d.spans)}):",
             f"  live: {d.live_rows} rows, {d.live_quarantined} quarantined; shadow: {d.shadow_rows} rows, "
             f"{d.shadow_quarantined} quarantined",
             line("only in live", d.only_live), line("only in the shadow", d.only_shadow),
             line("bronze -> quarantine", d.to_quarantine), line("quarantine -> bronze", d.from_quarantine),
             line("quarantined in both, another error class", d.error_changed)]
    if d.tables:
        lines.append("  route tables (live rows -> shadow rows): "
                     + ", ".join(f"{t} {a} -> {b}" for t, (a, b) in d.tables.items()))
        lines.append(line("moved to another route table", d.moved_tables)
                     + (f": {', '.join(f'{m} {n}' for m, n in d.moves.items())}" if d.moves else ""))
    if d.added_columns:
        lines.append(f"  columns the shadow adds: {', '.join(d.added_columns)}")
    if d.removed_columns:
        lines.append(f"  columns only live has: {', '.join(d.removed_columns)}")
    if d.columns:
        lines.append("  changed values per column:")
        lines.extend(line(f"  {c}", m) for c, m in d.columns.items())
    else:
        lines.append("  no column's values changed")
    lines.append("  same as live" if d.same else "  `ingest shadow promote` makes the shadow's rows live")
    return "\n".join(lines)
