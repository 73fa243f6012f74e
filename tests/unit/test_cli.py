"""The `ingest` command's parts: every command names a function that exists (the parser names them by module and
name, imported only when a command runs), and the help imports none of them, nor pyspark."""

from __future__ import annotations

import argparse
import importlib
import inspect
import subprocess
import sys


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
    assert len(commands) == 27
    for line, parser in commands.items():
        func = parser._defaults["func"]
        assert func.__module__.startswith("ingestion.cli.commands."), line
        function = getattr(importlib.import_module(func.__module__), func.__name__, None)
        assert callable(function), f"{line}: {func.__module__}.{func.__name__}"
        assert list(inspect.signature(function).parameters) == ["args"], line


def test_the_help_imports_no_command_module_and_no_spark() -> None:
    code = ("import contextlib, io, sys\n"
            "from ingestion.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['--help'])\n"
            "heavy = sorted(m for m in sys.modules if m.startswith(('pyspark', 'py4j', 'ingestion.cli.commands.',\n"
            "                                                        'ingestion.ops', 'ingestion.stream')))\n"
            "print(heavy)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
