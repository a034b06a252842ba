"""The ``ib_ports`` intent of a node (issue 22): loaded from a real inventory, bad values one line naming
the file, the key and what is allowed; an InfiniBand-only node needs no RoCE ``nics``."""

from __future__ import annotations

import typing

import pytest
import yaml

from tuning import inventory
from tuning.errors import InputError
from tuning.model.ib_ports import IbPortsSpec
from tuning.parsers.ib_sysfs import LANE_GBPS

HCAS = [f"mlx5_{i}" for i in range(8)]


def _load(tmp_path, group_vars: dict):
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    hosts = {"all": {"children": {"gpu_nodes": {"hosts": {"node01": {"ansible_host": "127.0.0.1"}}}}}}
    (tmp_path / "hosts.yaml").write_text(yaml.safe_dump(hosts))
    (tmp_path / "group_vars" / "gpu_nodes.yml").write_text(yaml.safe_dump(group_vars))
    return inventory.load(tmp_path).devices["node01"]


def test_group_intent_loads_for_an_infiniband_only_node(tmp_path):
    dev = _load(tmp_path, {"ib_ports": {"hcas": HCAS, "width": "4X", "speed": "HDR"}})
    assert dev.spec.nics == [] and dev.spec.ib_ports.hcas == HCAS
    assert (dev.spec.ib_ports.lanes, dev.spec.ib_ports.speed, dev.spec.ib_ports.active_mtu) == (4, "HDR", None)
    assert _load(tmp_path, {"ib_ports": {"hcas": HCAS, "active_mtu": 4096}}).spec.ib_ports.active_mtu == 4096


@pytest.mark.parametrize("ib_ports, key, allowed", [
    ({"hcas": ["mlx5_0"], "width": "3X"}, "ib_ports.width", "'1X', '2X', '4X', '8X' or '12X'"),
    ({"hcas": ["mlx5_0"], "speed": "hdr"}, "ib_ports.speed", "'SDR', 'DDR', 'QDR', 'FDR10', 'FDR', 'EDR', 'HDR', 'NDR' or 'XDR'"),
    ({"hcas": ["mlx5_0", "mlx5_0"]}, "ib_ports.hcas", "each HCA once"),
    ({"hcas": []}, "ib_ports.hcas", "at least 1"),
    ({"hcas": ["mlx5 0"]}, "ib_ports.hcas.0", "like mlx5_0"),
    ({"hcas": ["mlx5_0"], "active_mtu": 4000}, "ib_ports.active_mtu", "256, 512, 1024, 2048 or 4096"),
    ({"hcas": ["mlx5_0"], "active_mtu": "4096"}, "ib_ports.active_mtu", "256, 512, 1024, 2048 or 4096"),
    ({"hcas": ["mlx5_0"], "mtu": 4096}, "ib_ports.mtu", "allowed: active_mtu, hcas, speed, width"),
])
def test_a_bad_value_is_one_line_naming_file_key_and_allowed_values(tmp_path, ib_ports, key, allowed):
    with pytest.raises(InputError) as e:
        _load(tmp_path, {"ib_ports": ib_ports})
    line = str(e.value)
    assert "\n" not in line and line.startswith(f"{tmp_path}/group_vars/gpu_nodes.yml: {key}: "), line
    assert allowed in line, line


def test_a_node_with_neither_nics_nor_ib_ports_is_refused(tmp_path):
    with pytest.raises(InputError) as e:
        _load(tmp_path, {"mtu": 9000})
    assert str(e.value) == "host_vars/node01.yml: nics: required for node01 but set nowhere (host_vars/node01.yml " \
                           "missing?) (host node01)"
    with pytest.raises(InputError) as e:
        _load(tmp_path, {"nics": []})
    assert str(e.value) == f"{tmp_path}/group_vars/gpu_nodes.yml: nics: needs at least 1 entry (got none) (host node01)"


def test_the_intent_speeds_are_the_kernel_rate_words():
    words = typing.get_args(IbPortsSpec.model_fields["speed"].annotation)
    assert words == tuple(LANE_GBPS)
