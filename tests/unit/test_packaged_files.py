"""What the package brings for a folder without the repository: the demo's pipeline and schema are the
repository's own (they may not drift apart), and `ingest new`'s defaults file loads."""

from __future__ import annotations

from pathlib import Path

from ingestion.config import load_pipeline
from ingestion.ops.project import lay_out

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ROOT / "ingestion" / "dev" / "demo_project"


def test_the_demo_s_packaged_pipeline_and_schema_are_the_repository_s() -> None:
    for name in ("conf/pipelines/orders.yaml", "schemas/orders-value/1.avsc"):
        assert (PACKAGED / name).read_bytes() == (ROOT / name).read_bytes(), name
    # the demo's own schemas (the CDC sample's are read from schemas/ by the tests and the benchmark)
    assert sorted(p.relative_to(ROOT / "schemas").as_posix() for p in (ROOT / "schemas").rglob("orders-*/*.avsc")) \
        == sorted(p.relative_to(PACKAGED / "schemas").as_posix() for p in (PACKAGED / "schemas").rglob("*.avsc"))


def test_a_new_project_s_defaults_file_is_valid_for_its_pipelines(tmp_path: Path, monkeypatch) -> None:
    placed = lay_out(tmp_path)
    assert [(p.path.relative_to(tmp_path).as_posix(), p.made) for p in placed] == [
        ("conf/pipelines", True), ("schemas", True), ("conf/defaults.yaml", True), (".gitignore", True)]
    (tmp_path / "conf" / "pipelines" / "payments.yaml").write_text("name: payments\ntopic: payments\n")
    monkeypatch.setenv("INGEST_CONF_DIR", str(tmp_path / "conf"))
    # inherits conf/defaults.yaml: a key the config does not know, or a bad value, would raise naming that file
    assert load_pipeline("payments").topic == "payments"
    assert [p.made for p in lay_out(tmp_path)] == [False, False, False, False]
