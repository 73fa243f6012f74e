"""The `ingest` commands, one module per command group; each function takes the parsed `argparse.Namespace` and
returns the exit code. `ingestion.cli.parser` imports a module only when one of its commands runs, so every
import that costs (pyspark, the ops modules) stays inside the functions."""
