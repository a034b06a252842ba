"""A plan over more than DETAIL_DEVICES devices prints one row per domain (counts and the most
wanted values) instead of a row per setting; ``--detail`` prints every row (issue 24: 10,000 nodes
are 500,000 rows, 32 s of CPU at 1,000 nodes)."""

from __future__ import annotations

import io
import subprocess
import sys

from rich.console import Console

from tests.conftest import REPO
from tuning.report import DETAIL_DEVICES, changes_summary


def _text(renderable) -> str:
    c = Console(file=io.StringIO(), width=200, highlight=False)
    c.print(renderable)
    return c.file.getvalue()


def test_the_summary_counts_devices_settings_and_the_most_wanted_values():
    changes = {f"n{i:02d}": [{"domain": "mtu", "key": f"mtu/eth{k}", "before": "1500", "after": "9000"}
                             for k in range(8)] + [{"domain": "sysctl", "key": "net.core.rmem_max", "before": None,
                                                    "after": str(1 << (20 + i % 5))}]
               for i in range(40)}
    changes["s1"] = [{"domain": "switch", "key": "interface/swp1/mtu", "before": "1500", "after": "9216"}]
    text = _text(changes_summary(changes, "plan"))
    assert "plan: summary of 361 change(s) on 41 device(s), one row per domain" in text
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:5]] for line in text.splitlines()
            if line.startswith("│")}
    assert rows["mtu"] == ["40", "320", "9000 x320"]
    assert rows["sysctl"] == ["40", "40", "1048576 x8, 2097152 x8, 4194304 x8, +2 more"]
    assert rows["switch"] == ["1", "1", "9216 x1"]
    assert "every setting: --detail, or --limit to fewer devices" in text


def test_plan_prints_the_summary_over_the_threshold_and_every_row_with_detail():
    su = str(REPO / "inventory" / "example-su")  # 44 devices
    assert DETAIL_DEVICES < 44

    def plan(*extra: str) -> str:
        res = subprocess.run([sys.executable, "-m", "tuning", "plan", "--offline", "-i", su, *extra],
                             capture_output=True, text=True, timeout=120, cwd=REPO, env={"COLUMNS": "200", "PATH": ""})
        assert res.returncode == 0, res.stderr
        return res.stdout

    summary, detail = plan(), plan("--detail")
    assert "one row per domain" in summary and "mtu/enp12s0np0" not in summary
    assert "│ mtu      │ 32      │ 256      │ 9000 x256" in summary, summary
    assert "one row per domain" not in detail
    assert sum("mtu/enp12s0np0" in line for line in detail.splitlines()) == 32  # one per node
    limited = plan("--limit", "gpu-su1-n0*")  # 9 nodes: under the threshold, every row again
    assert "one row per domain" not in limited and sum("mtu/enp12s0np0" in ln for ln in limited.splitlines()) == 9


def test_findings_of_one_kind_are_one_row_naming_what_they_cover():
    from tuning.report import findings_table

    nics = [f"enp{i}s0np0" for i in range(8)]
    found = [{"device": f"node0{n}", "domain": "pause", "code": code,
              "message": f"{nic}: 802.3x pause {d} on beside PFC (priority 3): throttles every priority",
              "evidence": "ethtool -a: rx on tx on; PFC priorities [3]"}
             for n in (1, 2) for nic in nics for code, d in (("global-pause-rx", "RX"), ("global-pause-tx", "TX"))]
    found.append({"device": "node01", "domain": "modules", "code": "peermem-unregistered",
                  "message": "nvidia_peermem is not loaded", "evidence": ""})
    c = Console(file=io.StringIO(), width=400, highlight=False)
    c.print(findings_table(found))
    rows = [line for line in c.file.getvalue().splitlines() if line.startswith("│")]
    assert len(rows) == 3, rows  # 33 findings: two kinds of pause and one module, a row each
    assert "│ node01, node02 │ pause   │ global-pause-rx" in rows[0]
    assert ("802.3x pause RX on beside PFC (priority 3): throttles every priority (8: enp0s0np0, enp1s0np0, "
            "enp2s0np0, enp3s0np0, +4 more)") in rows[0]
    assert "nvidia_peermem is not loaded" in rows[2]


def test_a_small_plan_or_a_small_limit_gets_a_row_per_setting_and_a_large_one_the_summary():
    from tuning.report import DETAIL_ROWS, per_setting

    def plan(devices: int, per_device: int) -> dict:
        return {f"n{i}": [{"domain": "mtu", "key": f"mtu/eth{k}"} for k in range(per_device)] for i in range(devices)}

    assert per_setting(plan(4, DETAIL_ROWS // 4)) and not per_setting(plan(4, DETAIL_ROWS // 4 + 1))
    assert not per_setting(plan(4, 110))  # the 4-node lab: 441 rows are a summary by default
    assert per_setting(plan(4, 110), detail=True) and per_setting(plan(4, 110), limited=True)
    assert not per_setting(plan(DETAIL_DEVICES + 1, 2), limited=True)  # a --limit of many devices: still a summary

