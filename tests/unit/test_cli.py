"""The `ingest` command's parts: every command names a function that exists (the parser names them by module and
name, imported only when a command runs), and the help imports none of them, nor pyspark."""

from __future__ import annotations

import argparse
import importlib
import inspect
import subprocess
import sys

import pytest


def _commands(parser: argparse.ArgumentParser, path: str = "ingest") -> dict[str, argparse.ArgumentParser]:
    """Every runnable (sub)command by its command line, e.g. 'ingest quarantine show'."""
    found = {path: parser} if "func" in parser._defaults else {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _commands(sub, f"{path} {name}")
    return found


def test_every_command_names_a_command_function_that_exists() -> None:
    from ingestion.cli.parser import build_parser

    commands = _commands(build_parser())
    assert len(commands) == 32
    for line, parser in commands.items():
        func = parser._defaults["func"]
        assert func.__module__.startswith("ingestion.cli.commands."), line
        function = getattr(importlib.import_module(func.__module__), func.__name__, None)
        assert callable(function), f"{line}: {func.__module__}.{func.__name__}"
        assert list(inspect.signature(function).parameters) == ["args"], line


def test_every_command_explains_itself_in_its_help_and_takes_verbose_before_or_after_it() -> None:
    from ingestion.cli.parser import build_parser

    parser = build_parser()
    for line, command in _commands(parser).items():
        assert "-v" in command._option_string_actions, line
        assert command.description, f"{line} --help says nothing above its options"
        unexplained = [a.dest for a in command._actions if not a.help and not isinstance(a, argparse._HelpAction)]
        assert not unexplained, f"{line} --help lists {unexplained} without a word"
    assert parser.parse_args(["verify", "orders", "-v"]).verbose
    assert parser.parse_args(["quarantine", "show", "orders", "--verbose"]).verbose
    assert parser.parse_args(["kafka", "start", "-v"]).verbose
    assert parser.parse_args(["-v", "verify", "orders"]).verbose  # a subcommand's default does not undo it
    assert not parser.parse_args(["verify", "orders"]).verbose


def test_an_unquoted_query_is_one_query() -> None:
    from ingestion.cli.parser import build_parser

    parser = build_parser()
    assert parser.parse_args(["sql", "SELECT status, count(*) FROM bronze.orders GROUP BY 1"]).query == \
        "SELECT status, count(*) FROM bronze.orders GROUP BY 1"
    args = parser.parse_args(["sql", "SELECT", "status,", "count(*)", "FROM", "bronze.orders", "--limit", "5"])
    assert (args.query, args.limit) == ("SELECT status, count(*) FROM bronze.orders", 5)


@pytest.mark.parametrize(("argv", "dest", "least"), [
    (["quarantine", "show", "orders", "--limit"], "limit", 1), (["sql", "SELECT 1", "--limit"], "limit", 1),
    (["demo", "--records"], "records", 1), (["rewind", "orders", "--to-version"], "to_version", 0),
    (["silver", "rebuild", "orders", "--from-version"], "from_version", 0)])
def test_counts_and_versions_are_whole_numbers_the_command_line_checks(
        argv: list[str], dest: str, least: int, capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli.parser import build_parser

    for wrong in (str(least - 1), "-5", "1.5", "ten"):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args([*argv, wrong])
        assert exited.value.code == 2
        said = capsys.readouterr().err.strip().splitlines()[-1]
        assert said.endswith(f"error: argument {argv[-1]}: {wrong!r} is not a whole number of {least} or more"), said
    assert getattr(build_parser().parse_args([*argv, str(least)]), dest) == least


def test_no_option_takes_any_integer_but_ports() -> None:
    from ingestion.cli.parser import build_parser

    plain = [f"{line} {action.option_strings}" for line, command in _commands(build_parser()).items()
             for action in command._actions if action.type is int and "port" not in action.dest]
    assert plain == []


def test_the_help_imports_no_command_module_and_no_spark() -> None:
    code = ("import contextlib, io, sys\n"
            "from ingestion.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])\n"
            "heavy = sorted(m for m in sys.modules if m.startswith(('pyspark', 'py4j', 'ingestion.cli.commands.',\n"
            "                                                        'ingestion.ops', 'ingestion.stream')))\n"
            "print(heavy)")
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_the_exit_keeps_the_code_the_output_the_exit_handlers_and_threads() -> None:
    """`ingest` ends without the interpreter's teardown (`exit_now`), but as an exit would otherwise: the command's
    code, its buffered output, the exit handlers (logging's flush, the class archive's hand-over) and the
    non-daemon threads' work all kept."""
    code = ("import atexit, sys, threading, time\n"
            "from ingestion.cli import exit_now\n"
            "atexit.register(lambda: print('handler ran', file=sys.stderr))\n"
            "threading.Thread(target=lambda: (time.sleep(0.3), print('thread done'))).start()\n"
            "sys.stdout.write('buffered output ')\n"
            "exit_now(3)\n")
    done = _python(code)
    assert done.returncode == 3, done.stderr
    assert done.stdout == "buffered output thread done\n"
    assert done.stderr == "handler ran\n"


def test_the_console_script_is_the_entry_with_its_exit() -> None:
    import tomllib
    from pathlib import Path

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["ingest"] == "ingestion.cli:entry"


def test_output_closed_by_its_reader_ends_any_command_quietly_with_sigpipes_code() -> None:
    """`ingest history --json | head`: the command's output cut by its reader is no failure to report; exit 141 (as
    git and jq, ended by SIGPIPE), nothing on stderr. A broken pipe that is not standard output stays an error."""
    command = ("import sys\n"
               "from ingestion import cli\n"
               "parse = cli.build_parser\n"
               "def build():\n"
               "    parser = parse()\n"
               "    read = parser.parse_known_args\n"
               "    def parse_known_args(argv):\n"
               "        args, extra = read(argv)\n"
               "        args.func = {func}\n"
               "        return args, extra\n"
               "    parser.parse_known_args = parse_known_args\n"
               "    return parser\n"
               "cli.build_parser = build\n"
               "cli.exit_now(cli.main(sys.argv[1:]))\n")
    printing = "lambda args: any(print(f'version {i}') for i in range(200_000))"
    for verbose in ([], ["-v"]):
        with subprocess.Popen([sys.executable, "-c", command.format(func=printing), "history", "orders", *verbose],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as cut:
            assert cut.stdout is not None and cut.stderr is not None
            assert cut.stdout.readline() == "version 0\n"
            cut.stdout.close()
            assert cut.wait(30) == 141
            assert cut.stderr.read() == ""
    other = "lambda args: (_ for _ in ()).throw(BrokenPipeError(32, 'Broken pipe'))"
    done = subprocess.run([sys.executable, "-c", command.format(func=other), "history", "orders"],
                          capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (1, "error: BrokenPipeError: [Errno 32] Broken pipe (run with -v for the "
                                                 "trace)\n")


@pytest.mark.parametrize("command", ["run", "onboard", "maintain"])
def test_a_pipeline_and_all_together_or_neither_is_a_usage_error_saying_which(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli import main

    assert main([command, "orders", "--all"]) == 2
    assert capsys.readouterr().err == "error: name one pipeline (orders) or pass --all, not both\n"
    assert main([command]) == 2
    assert capsys.readouterr().err == "error: name one pipeline, or pass --all\n"


def test_the_hint_to_run_with_v_is_given_only_without_v(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion import cli

    build = cli.build_parser

    def failing() -> argparse.ArgumentParser:
        parser = build()
        _commands(parser)["ingest history"].set_defaults(func=lambda args: {}["missing"])
        return parser

    monkeypatch.setattr(cli, "build_parser", failing)
    assert cli.main(["history", "orders"]) == 1
    assert capsys.readouterr().err == "error: KeyError: 'missing' (run with -v for the trace)\n"
    for verbose in (["-v", "history", "orders"], ["history", "orders", "-v"]):
        assert cli.main(verbose) == 1
        err = capsys.readouterr().err
        assert err.startswith("Traceback") and err.endswith("\nerror: KeyError: 'missing'\n"), err


@pytest.mark.parametrize(("argv", "usage"), [(["status", "orders", "extra"], "usage: ingest status "),
                                             (["kafka", "status", "extra"], "usage: ingest kafka status ")])
def test_an_argument_too_many_is_said_with_the_commands_own_usage(argv: list[str], usage: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from ingestion.cli import main

    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith(usage) and said[-1] == f"{usage.split(': ')[1].strip()}: error: unrecognized " \
                                                      "arguments: extra", said
