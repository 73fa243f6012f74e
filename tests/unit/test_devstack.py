"""The local broker's pieces that need no broker."""

from __future__ import annotations

import base64
import socket
from pathlib import Path

import pytest

from ingestion import processes
from ingestion.dev.broker import new_cluster_id


def test_cluster_ids_are_kafkas_shape_and_never_read_as_an_option() -> None:
    ids = [new_cluster_id() for _ in range(2000)]  # one random id in 64 starts with '-'
    assert not [i for i in ids if i.startswith("-")]
    assert {len(i) for i in ids} == {22}
    assert {len(base64.urlsafe_b64decode(i + "==")) for i in ids} == {16}
    assert len(set(ids)) == len(ids)


def test_the_secured_brokers_material_is_made_once_and_kept_private(tmp_path: Path) -> None:
    import stat

    from cryptography import x509

    from ingestion.dev.secure import ADMIN, PIPELINE_USER, SecureSetup

    setup = SecureSetup(tmp_path)
    setup.prepare()
    first = {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()}
    setup.prepare()
    assert {f: f.read_bytes() for f in tmp_path.rglob("*") if f.is_file()} == first  # kept, not made again
    for private in (setup.home / "credentials" / ADMIN, setup.home / "credentials" / PIPELINE_USER,
                    setup.broker_pem, setup.tls / "ca.key"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    assert len({setup.password(ADMIN), setup.password(PIPELINE_USER)}) == 2
    broker = x509.load_pem_x509_certificates(setup.broker_pem.read_bytes())
    names = broker[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in names.get_values_for_type(x509.IPAddress)} == {"127.0.0.1"}
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    assert broker[1].subject == x509.load_pem_x509_certificate(setup.ca_file.read_bytes()).subject
    args = setup.format_arguments()
    assert args.count("--add-scram") == 4
    assert f"SCRAM-SHA-512=[name={PIPELINE_USER},password={setup.password(PIPELINE_USER)}]" in args
    lines = setup.properties({"SASL_SSL": 1, "SASL_PLAINTEXT": 2, "SSL": 3}, 4)
    assert "listeners=SASL_SSL://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2,SSL://127.0.0.1:3,CONTROLLER://127.0.0.1:4" \
        in lines
    assert "allow.everyone.if.no.acl.found=false" in lines
    assert "super.users=User:admin;User:ANONYMOUS" in lines


def test_a_free_port_for_a_server_is_below_the_range_outgoing_connections_take_theirs_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A port from the ephemeral range can be an outgoing connection's by the time a server binds it (a node of the
    three-broker cluster exited at its start so): servers get one below it, free, where the range is known."""
    (ranges := tmp_path / "ip_local_port_range").write_text("32768\t60999\n")
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE", ranges)
    ports = {processes.free_port() for _ in range(20)}
    assert all(processes.LOWEST_PORT <= p < 32768 for p in ports), ports
    port = ports.pop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: nothing holds it
        # a port taken is never given: with every candidate held, the kernel's own answer
        monkeypatch.setattr(processes.random, "randrange", lambda low, high: port)
        assert processes.free_port() != port
    monkeypatch.setattr(processes, "EPHEMERAL_RANGE", tmp_path / "none")  # unknown range: the kernel's answer
    assert processes.free_port() > 0
