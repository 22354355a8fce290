"""Target description: defaults, derived costs, TOML loading and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from raptor.target import Target, TargetError, load_target, show_target


def test_default_matches_architecture_table() -> None:
    t = load_target("default")
    assert (t.mesh_rows, t.mesh_cols, t.num_cores) == (8, 8, 64)
    assert t.crossbars_per_core == 64 and t.crossbar_capacity == 4096
    assert t.mvm_ns() == 1305
    assert t.shared_memory_bytes == 4 * 1024 * 1024


def test_costs_and_mesh() -> None:
    t = Target()
    assert t.core_coords(9) == (1, 1)
    assert t.hops(0, 63) == 14
    assert t.transfer_ns(100, 5, 5) == 0
    assert t.transfer_ns(9, 0, 9) == 2 * 2 + 2 * 2  # 2 hops, 2 flits
    assert t.vector_ns(33) == 8
    assert t.local_copy_ns(65) == 2
    slow = Target(clock_ghz=0.3)
    assert slow.ns(1) == 4 and slow.ns(3) == 10  # ceil(cycles / GHz)


def test_a_message_costs_what_the_targets_protocol_charges() -> None:
    """Raptor's mesh pipelines the flits behind the head; pimsim-nn charges a request, a
    reply and every data flit the whole path (data at the chip's 1-byte activations: 9 IR
    bytes are 3 elements, one flit). A flit's path is the same under both."""
    mesh, pim = Target(), Target(protocol="pimsim-nn", input_bits=8)
    assert mesh.transfer_ns(9, 0, 9) == 2 * 2 + 2 * 2
    assert pim.transfer_ns(9, 0, 9) == (1 + 2) * (2 * 2 + 2)
    assert pim.transfer_ns(9, 4, 4) == 0
    assert mesh.flit_ns(0, 9) == pim.flit_ns(0, 9) == 2 * 2 + 2


def test_toml_overrides_and_round_trip(tmp_path: Path) -> None:
    f = tmp_path / "small.toml"
    f.write_text('mesh = [2, 3]\ncrossbars_per_core = 16\nclock_ghz = 1.5\n')
    t = load_target(str(f))
    assert (t.name, t.num_cores, t.crossbars_per_core, t.clock_ghz) == ("small", 6, 16, 1.5)
    g = tmp_path / "again.toml"
    g.write_text(t.to_toml())
    assert load_target(str(g)) == t
    h = tmp_path / "rows.toml"
    h.write_text("mesh_rows = 4\nmesh_cols = 2\n")
    assert load_target(str(h)).num_cores == 8
    assert "cores" in t.describe()
    assert show_target(t).row_count > 20


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("meshes = 3\n", "unknown target key(s) meshes; known keys: mesh, name"),
        ("crossbars_per_core = 1.5\n", "'crossbars_per_core' must be an integer"),
        ("hop_cycles = 0\n", "'hop_cycles' must be positive"),
        ("conv_window_max = 0\n", "'conv_window_max' must be positive"),
        ("clock_ghz = -1.0\n", "'clock_ghz' must be positive"),
        ('mvm_cycles = "fast"\n', "'mvm_cycles' must be an integer"),
        ("mesh = [8]\n", "'mesh' must be [rows, cols]"),
        ("mesh = [2, 2]\nmesh_rows = 2\n", "either 'mesh' or"),
        ("mesh = [2, 2\n", "cannot parse target file"),
    ],
)
def test_toml_errors(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(TargetError) as info:
        load_target(str(f))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    if "parse" in message:
        assert "bad.toml" in str(info.value)


def test_missing_file_names_it() -> None:
    with pytest.raises(TargetError, match=r"cannot read target file nope\.toml"):
        load_target("nope.toml")
