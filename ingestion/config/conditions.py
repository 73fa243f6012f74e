"""SQL conditions of a pipeline file (`expectations[].expect`, `silver.deleteWhen`, `silver.truncateWhen`): each
must be exactly one row-level expression, since the product embeds its text in larger statements (`(expr)`,
`coalesce((expr), FALSE)`): `amount < 0) OR (1=1` would otherwise become a rule that always passes.

Checked on DuckDB's parse tree, without a schema: the text must parse as the WHERE clause of `SELECT * FROM t`
and leave the rest of that statement as it was (no GROUP BY, ORDER BY, LIMIT, UNION, `;` or a comment that
swallows what follows), and hold no aggregate, window function or subquery (a rule is on one row; Spark refuses
those only at run time). Its columns and type are checked against bronze's columns where a command has them
(`decode.expectations.compile_rules`, `silver.spec.SilverSpec.check`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

from ingestion.errors import ConfigError

_PROBE = "SELECT * FROM __ingest_row WHERE "
# Spark's aggregates DuckDB has no function of that name for (DuckDB's own come from its catalog).
_SPARK_AGGREGATES = frozenset({"collect_list", "collect_set", "percentile", "percentile_approx", "approx_percentile",
                               "try_avg", "try_sum", "every", "some", "any", "count_min_sketch", "hll_sketch_agg",
                               "first", "first_value", "last", "last_value", "std", "stddev", "histogram_numeric",
                               "count_if", "max_by", "min_by", "bool_and", "bool_or", "regr_count"})


def problem(text: str, *, spark_dialect: bool = False) -> str | None:
    """Why `text` is not one row-level SQL condition, in a few words, or None when it is one. `spark_dialect`: a
    text DuckDB does not parse may be Spark's own SQL (`a RLIKE 'x'`, `exists(xs, x -> ...)`): None, and Spark,
    which parses it alone (never inside a larger statement), decides; what DuckDB parses is checked all the same."""
    found = _problem(text)
    return None if spark_dialect and found is not None and found.startswith(_UNPARSED) else found


_UNPARSED = "does not parse"


@functools.lru_cache(maxsize=1024)  # a file's conditions are checked at load and again against bronze's columns
def _problem(text: str) -> str | None:
    import duckdb

    if not text.strip():
        return "is empty"
    try:
        tokens = duckdb.tokenize(text + " 0")
    except duckdb.Error as exc:
        return f"{_UNPARSED} ({_first_line(exc)})"
    if any(text[at:at + 1] == ";" for at, _ in tokens):
        return "holds ';': give one condition, not statements"
    if tokens[-1][0] != len(text) + 1:  # a `--` comment or an open quote takes in what is written after it
        return "ends inside a comment or a quoted text, which would take in the SQL written after it"
    tree = _parsed(text)
    if tree.get("error"):
        return f"{_UNPARSED} ({tree.get('error_message') or 'no statement'})"
    node = tree["statements"][0]["node"]
    where = node.pop("where_clause", None)
    if where is None or _unlocated(node) != _bare():
        return "goes on past one condition (GROUP BY, ORDER BY, LIMIT, UNION, ...)"
    for each in _nodes(where):
        kind = each.get("class")
        if kind == "WINDOW":
            return f"uses the window function {each.get('function_name', '')!r}; a condition is on one row"
        if kind == "SUBQUERY":
            return "holds a subquery; a condition is on one row"
        name = str(each.get("function_name", "")).lower().replace("count_star", "count")
        if kind == "FUNCTION" and (name in _aggregates() or each.get("distinct") or each.get("filter")):
            return f"uses the aggregate function {name!r}; a condition is on one row"
    return None


def check(where: str, text: str, *, spark_dialect: bool = False) -> None:
    """ConfigError `<where>: must be one SQL condition on a row ...` when `text` is not one (`problem`)."""
    why = problem(text, spark_dialect=spark_dialect)
    if why is not None:
        raise ConfigError(f"{where}: must be one SQL condition on a row, such as 'qty > 0', but it {why}")


def where(file: object, key: str, text: str, rule: str = "") -> str:
    """How an error names a condition: `<file>: key 'silver.deleteWhen' ('<text>')`, with the rule's name for an
    expectation."""
    return f"{file}: key {key!r} (" + (f"rule {rule!r}, " if rule else "") + f"{text!r})"


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), type(exc).__name__)


def _parsed(text: str) -> dict[str, Any]:
    con = _connection().cursor()  # a cursor of its own per call: checks run on several threads at once
    row = con.execute("SELECT json_serialize_sql(?)", [_PROBE + text]).fetchone()
    parsed: dict[str, Any] = json.loads(row[0]) if row else {"error": True}
    if not parsed.get("error") and len(parsed.get("statements", ())) != 1:
        return {"error": True, "error_message": "more than one statement"}
    return parsed


@functools.cache
def _connection() -> Any:
    import duckdb

    return duckdb.connect()


@functools.cache
def _bare() -> Any:
    """The probe's statement without a WHERE clause, as the parse tree of a condition must leave it."""
    node = json.loads(_connection().cursor().execute("SELECT json_serialize_sql(?)", [_PROBE.removesuffix(" WHERE ")])
                      .fetchone()[0])["statements"][0]["node"]
    node.pop("where_clause", None)
    return _unlocated(node)


@functools.cache
def _aggregates() -> frozenset[str]:
    """DuckDB's aggregate functions (but names that are also scalar functions) and Spark's it lacks."""
    rows = _connection().cursor().execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() WHERE function_type = 'aggregate' EXCEPT "
        "SELECT function_name FROM duckdb_functions() WHERE function_type <> 'aggregate'").fetchall()
    return frozenset(str(r[0]).lower() for r in rows) | _SPARK_AGGREGATES


def _unlocated(value: Any) -> Any:
    """A parse tree without its positions in the text."""
    if isinstance(value, dict):
        return {k: _unlocated(v) for k, v in value.items() if k != "query_location"}
    if isinstance(value, list):
        return [_unlocated(v) for v in value]
    return value


def _nodes(value: Any) -> Iterator[dict[str, Any]]:
    """Every expression node of a parse tree, outermost first."""
    if isinstance(value, dict):
        if "class" in value:
            yield value
        for child in value.values():
            yield from _nodes(child)
    elif isinstance(value, list):
        for child in value:
            yield from _nodes(child)
