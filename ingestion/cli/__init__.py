"""The `ingest` command. Thin: parses arguments (`parser`), calls a command (`commands/`), prints. Exit 0 ok,
1 failure, 2 usage, 3 (`verify` only) exact tables but a silver pipeline's change records in quarantine, 141 its
output closed by its reader (`| head`), quietly. Here: logging, every failure as one line on stderr with secret
values masked, and the process's exit (`entry`)."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import NoReturn

from ingestion.cli.parser import build_parser, command_parser
from ingestion.errors import IngestionError, UsageError, one_line

__all__ = ["entry", "main"]

# A command whose standard output was closed by its reader ends quietly with the code of a process ended by SIGPIPE
# (128 + 13), as git and jq do in `... | head`: a shell without `pipefail` ignores it, one with it sees the cut.
CLOSED_OUTPUT = 141


def entry() -> NoReturn:
    """The console script: `main`, then the exit without the interpreter's teardown (`exit_now`)."""
    exit_now(main())


def exit_now(code: int) -> NoReturn:
    """End the process with `code` as Python's exit would, less its last step: freeing each object of every module
    (Spark's, MLflow's, pyarrow's), 0.6 to 0.8 s of one core after a run (docs/performance.md#a-runs-fixed-cost).
    Every promise is kept before `main` returns (commits, ledger, offsets to the group, MLflow run ended, writer
    lock released); here the non-daemon threads are joined and the exit handlers run (logging's flush, the class
    archive's hand-over) as at any exit, the output flushed, and the JVM, whose standard input closes with this
    process, exits on its own."""
    shutdown = getattr(threading, "_shutdown", None)  # what Python's exit runs first: joins non-daemon threads
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said with the command's own usage (`ingest status [-h] ...`), not the top level's
        command_parser(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    _logging(verbose=args.verbose)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        _failed(str(exc), exc, args.verbose)
        return 2
    except IngestionError as exc:
        return _failed(str(exc), exc, args.verbose)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - every failure ends in one line; the trace only with -v
        if isinstance(exc, BrokenPipeError) and _stdout_closed():  # `... | head`: the reader has what it wanted
            return CLOSED_OUTPUT
        hint = "" if args.verbose else " (run with -v for the trace)"  # with -v, the trace is just above
        return _failed(f"{type(exc).__name__}: {one_line(exc)}{hint}", exc, args.verbose)


def _stdout_closed() -> bool:
    """Whether the reader of standard output has gone (a pipe into `head`: its write end polls as an error); if so,
    what is left to print goes to /dev/null, as Python's documentation advises
    (docs.python.org/3/library/signal.html#note-on-sigpipe), so no later line or the exit's flush fails again."""
    import select

    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        closed = any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), no descriptor (a captured stdout)
        return False
    if closed:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return closed


def _logging(*, verbose: bool) -> None:
    """Progress lines (INFO) on stdout, warnings and errors on stderr; debug and librdkafka's own lines with -v."""
    root = logging.getLogger()
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    formatter = logging.Formatter("%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    progress = logging.StreamHandler(sys.stdout)
    progress.addFilter(lambda record: record.levelno < logging.WARNING)
    problems = logging.StreamHandler(sys.stderr)
    problems.setLevel(logging.WARNING)
    for handler in (progress, problems):
        handler.setFormatter(formatter)
        handler.addFilter(_masked)
        root.addHandler(handler)
    for noisy in ("alembic", "mlflow", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # py4j logs, with a trace, every exception raised in a Python callback (foreachBatch, the listener); the
    # pipeline reports the cause itself in one line. Its DEBUG lines (every command sent to the JVM) drown -v.
    logging.getLogger("py4j").setLevel(logging.WARNING if verbose else logging.CRITICAL + 1)
    logging.getLogger("ingestion.librdkafka").setLevel(logging.DEBUG if verbose else logging.CRITICAL + 1)


def _masked(record: logging.LogRecord) -> bool:
    """A log record with every secret value of the loaded configs replaced by '***' (`security.mask`): no setting
    is logged on purpose, this is the last guard for what clients put in their messages."""
    from ingestion import security

    text = record.getMessage()
    shown = security.mask(text)
    if shown != text:
        record.msg, record.args = shown, None
    if record.exc_info and record.exc_info[1] is not None:
        import traceback

        record.exc_text = security.mask("".join(traceback.format_exception(*record.exc_info)).rstrip())
    return True


def _failed(message: str, exc: BaseException, verbose: bool) -> int:
    from ingestion import security

    if verbose:
        import traceback

        print(security.mask("".join(traceback.format_exception(exc))), end="", file=sys.stderr)
    print(f"error: {security.mask(message)}", file=sys.stderr)
    return 1
