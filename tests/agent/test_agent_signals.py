"""Identity signals read from a host root: what lets the Console re-bind a returning machine."""

from __future__ import annotations

from pathlib import Path

from agent.signals import read_signals

MACHINE_ID = "0123456789abcdef0123456789abcdef"
UUID = "4C4C4544-0042-3510-8052-B4C04F4E4D32"


def fake_root(tmp_path: Path, machine_id: str | None, uuid: str | None) -> Path:
    root = tmp_path / "host"
    (root / "etc").mkdir(parents=True)
    (root / "sys/class/dmi/id").mkdir(parents=True)
    if machine_id is not None:
        (root / "etc/machine-id").write_text(machine_id + "\n")
    if uuid is not None:
        (root / "sys/class/dmi/id/product_uuid").write_text(uuid + "\n")
    return root


def test_both_signals_are_read_from_the_host_root(tmp_path: Path) -> None:
    signals = read_signals(fake_root(tmp_path, MACHINE_ID, UUID))
    assert signals.machine_id == MACHINE_ID
    assert signals.product_uuid == UUID.lower()


def test_missing_files_give_no_signals(tmp_path: Path) -> None:
    signals = read_signals(fake_root(tmp_path, None, None))
    assert signals.present() == {}


def test_placeholders_are_not_evidence(tmp_path: Path) -> None:
    root = fake_root(tmp_path, "uninitialized", "00000000-0000-0000-0000-000000000000")
    assert read_signals(root).present() == {}


def test_unreadable_dmi_uuid_is_skipped(tmp_path: Path) -> None:
    root = fake_root(tmp_path, MACHINE_ID, UUID)
    dmi = root / "sys/class/dmi/id/product_uuid"
    dmi.unlink()
    dmi.mkdir()  # reading a directory fails like an unreadable file would
    signals = read_signals(root)
    assert signals.machine_id == MACHINE_ID
    assert signals.product_uuid is None


def test_dmi_uuid_falls_back_to_the_host_sys_mount(tmp_path: Path) -> None:
    root = fake_root(tmp_path, MACHINE_ID, None)
    host_sys = tmp_path / "hostsys"
    (host_sys / "class/dmi/id").mkdir(parents=True)
    (host_sys / "class/dmi/id/product_uuid").write_text(UUID)
    assert read_signals(root, host_sys).product_uuid == UUID.lower()
