"""`ingest replay --from/--to`: every documented position form read without Kafka or a JVM, and every wrong one
refused by the command line in one line naming the option and the value (exit 2), never a Python or Java exception
after a JVM started."""

from __future__ import annotations

import json

import pytest

from ingestion.cli import main
from ingestion.cli.parser import build_parser
from ingestion.ops.replay import source_option
from ingestion.positions import EARLIEST, LATEST, ending, replay_range, starting

MARKS = {"orders": {0: (0, 500), 1: (0, 500)}}


@pytest.mark.parametrize(("start", "end", "options"), [
    ("earliest", "latest", ("earliest", "latest")),
    ("0:100,1:250", "0:200,1:300", ({"0": 100, "1": 250}, {"0": 200, "1": 300})),
    ("0:100", "latest", ({"0": 100, "1": EARLIEST}, "latest")),  # partitions not named: read whole
    (" 0:100 , 1:250 ", "0:100,1:250", ({"0": 100, "1": 250}, {"0": 100, "1": 250})),  # an empty range
    ('{"orders": {"0": 100, "1": -2}}', '{"orders": {"0": 200, "1": -1}}',
     ({"0": 100, "1": EARLIEST}, {"0": 200, "1": LATEST})),
    ("2026-11-21T05:00:00", "2026-11-21T06:00:00+01:00", (1795237200000, 1795237200000)),  # a zone named
    ("2026-11-21", "1795237200000", (1795219200000, 1795237200000)),  # a date; epoch milliseconds
])
def test_every_documented_position_form_reaches_kafka_as_spark_takes_it(start: str, end: str,
                                                                         options: tuple[object, object]) -> None:
    args = build_parser().parse_args(["replay", "orders", "--from", start, "--to", end])
    first, last = replay_range(args.start, args.end)
    found = []
    for position in (first, last):
        key, value = source_option(position, MARKS)
        found.append(int(value) if key.endswith("Timestamp") else
                     value if value in ("earliest", "latest") else json.loads(value)["orders"])
    assert tuple(found) == options
    assert build_parser().parse_args(["replay", "orders", "--from", "earliest"]).end.edge == "latest"  # the default


@pytest.mark.parametrize(("argv", "said"), [
    (["--from", "0:abc"], "argument --from: cannot read '0:abc' as partition:offset pairs"),
    (["--from", "0:1,x:2"], "argument --from: cannot read '0:1,x:2' as partition:offset pairs"),
    (["--from", "0:-5"], "argument --from: offset -5 of partition 0 in '0:-5': offsets are 0 or more"),
    (["--from", "0:10,0:20"], "argument --from: partition 0 is named twice in '0:10,0:20'"),
    (["--from", '{"orders": {"0": 1, "0": 2}}'], "argument --from: '0' is named twice"),
    (["--from", "latest"], "argument --from: latest cannot start a replay: a replay reads a bounded range"),
    (["--from", "0:1", "--to", "earliest"], "argument --to: earliest cannot end a replay"),
    (["--from", '{"orders": {"0": -1}}'], "a replay starts at an offset (0 or more) or at -2 (earliest)"),
    (["--from", "0:1", "--to", '{"orders": {"0": -2}}'], "a replay ends at an offset (0 or more) or at -1 (latest)"),
    (["--from", '{"orders": [1]}'], "argument --from: cannot read '{\"orders\": [1]}' as a position: Spark's JSON"),
    (["--from", "yesterday"], "argument --from: cannot read 'yesterday' as a position: use earliest, latest, "
                              "partition:offset pairs"),
    (["--from", "2026/11/21"], "argument --from: cannot read '2026/11/21' as a position"),
])
def test_a_wrong_position_is_a_usage_error_naming_the_option_and_the_value(
        argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["replay", "no-such-pipeline", *argv])  # refused before the pipeline is even looked for
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert said in err, err
    assert "Error" not in err and "Exception" not in err, err


@pytest.mark.parametrize(("start", "end", "said"), [
    ("0:100", "0:50", "error: --from 0:100 is after --to 0:50: partition 0 starts at offset 100 and ends at 50"),
    ('{"orders": {"1": 9}}', "0:5,1:8", "partition 1 starts at offset 9 and ends at 8"),
    ("2026-11-21T06:00:00", "2026-11-21T05:00:00", "error: --from 2026-11-21T06:00:00 is after --to "
                                                   "2026-11-21T05:00:00"),
    ("1795237200001", "2026-11-21T05:00:00", "is after --to"),
])
def test_a_start_after_its_end_is_refused_naming_both_before_anything_starts(
        start: str, end: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "no-such-pipeline", "--from", start, "--to", end]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "\n" not in err, err
    replay_range("0:100", "1:50")  # other partitions: Kafka's answer decides, each read to its end
    replay_range(starting("0:100"), ending("2026-11-21T05:00:00"))  # offsets and a time: not comparable here


@pytest.mark.parametrize("offset", ["1.7", "true"])
def test_an_offset_of_spark_s_json_form_that_is_no_whole_number_is_refused(offset: str) -> None:
    from ingestion.cli.parser import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["replay", "orders", "--from", f'{{"orders": {{"0": {offset}}}}}'])
