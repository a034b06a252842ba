"""The burn-in HTML report (self-contained, escaped, opened in headless Chromium: the heatmap
decodes and renders) and the Prometheus textfile."""

from __future__ import annotations

import base64
import io
import re
import shutil
import subprocess

import pytest

from tests.burnin.burnin_docs import fabric, make_doc
from tuning.burnin import html_report, prom
from tuning.burnin.localise import localise

#: flags for a headless Chromium with no network side traffic and a fresh profile
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
EVIL = '<script>alert("x")</script> & <img src=http://example.com/x.png>'


def doc_and_findings():
    def mutate(rnd, i):
        rnd["nics"]["node02"]["mlx5_1"]["counters"]["rx_symbol_err_phy"] = 40 * (i + 1)
        rnd["gpus"]["node05"][3]["xid"] = [79]
        rnd["errors"]["node07"] = EVIL if i == 0 else None
        rnd["errors"] = {k: v for k, v in rnd["errors"].items() if v}
    doc = make_doc(fabric(8, 8, 2, 1), slow={"node03:mlx5_2": 0.3}, mutate=mutate)
    found = localise(doc)
    found[0]["message"] += " " + EVIL
    return doc, found


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("chromium is not installed: the report must be shown to render in a browser "
                    "(.ci/run installs Debian's chromium as root; elsewhere: apt-get install chromium)")
    return exe


def test_report_is_self_contained_and_escaped(tmp_path):
    doc, found = doc_and_findings()
    path = tmp_path / "burnin.html"
    html_report.write(doc, found, path)
    text = path.read_text()
    assert "<script" not in text.lower() and "<link" not in text and "href=" not in text and "url(" not in text
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img src=http://example.com/x.png&gt;" in text
    srcs = re.findall(r'src="([^"]*)"', text)
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    from matplotlib.image import imread

    img = imread(io.BytesIO(base64.b64decode(srcs[0].split(",", 1)[1])), format="png")
    assert img.shape[0] > 300 and img.shape[1] > 300
    assert "node03:mlx5_2&lt;-&gt;leaf01:swp11" in text and "gpu-xid" in text and "rx_symbol_err_phy 240" in text


def test_heatmap_matrix_marks_the_bad_link():
    doc, _ = doc_and_findings()
    from tuning.burnin.localise import fabric_graph, pair_stats

    labels, m = html_report.share_matrix(doc, pair_stats(doc, fabric_graph(doc["topology"])))
    assert len(labels) == 64 and labels[:2] == ["node01:mlx5_0", "node02:mlx5_0"]
    row = m[labels.index("node03:mlx5_2")]
    assert max(v for v in row if v is not None) < 0.35
    assert min(v for v in m[labels.index("node04:mlx5_4")] if v is not None) > 0.85


def test_heatmap_renders_in_headless_chromium(tmp_path):
    exe = chromium()
    doc, found = doc_and_findings()
    path = tmp_path / "burnin.html"
    html_report.write(doc, found, path)
    shot = tmp_path / "shot.png"
    flags = CHROMIUM_FLAGS + [f"--user-data-dir={tmp_path / 'profile'}"]
    subprocess.run([exe, *flags, "--window-size=1200,1400", f"--screenshot={shot}", path.as_uri()],
                   capture_output=True, timeout=180, check=True)
    from PIL import Image

    pixels = Image.open(shot).convert("RGB")
    assert pixels.size == (1200, 1400) and shot.stat().st_size > 50_000
    colours = pixels.getcolors(maxcolors=1 << 20)
    green = sum(n for n, (r, g, b) in colours if g > r + 60 and g > b + 30)  # RdYlGn's healthy end
    low = sum(n for n, (r, g, b) in colours if r > 200 and g < 150 and b < 100)  # its red/orange end: the bad link
    assert green > 100_000 and low > 500
    # the same page with one probe script (a test copy only: the report has none): the heatmap decoded
    probe = tmp_path / "probe.html"
    probe.write_text(path.read_text().replace(
        "</body>", "<script>window.onload=()=>{const i=document.getElementById('heatmap');"
        "document.title='decoded '+i.naturalWidth+'x'+i.naturalHeight+' '+i.complete}</script></body>"))
    dom = subprocess.run([exe, *flags, "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                         timeout=180, check=True).stdout
    size = re.search(r"<title>decoded (\d+)x(\d+) true</title>", dom)
    assert size and int(size.group(1)) > 300 and int(size.group(2)) > 300


def test_prometheus_textfile(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    doc, found = doc_and_findings()
    path = tmp_path / "burnin.prom"
    prom.write(doc, found, path)
    fams = {f.name: f for f in text_string_to_metric_families(path.read_text())}
    finding = {(s.labels["code"], s.labels["target"]) for s in fams["fabtune_burnin_finding"].samples}
    assert finding == {(f["code"], f["target"]) for f in found}
    healthy = {s.labels["node"]: s.value for s in fams["fabtune_burnin_node_healthy"].samples}
    assert [n for n, v in healthy.items() if v == 0] == ["node02", "node03", "node05"]
    slow = {(s.labels["client_nic"], s.labels["server_nic"]): s.value for s in fams["fabtune_burnin_pair_slow"].samples}
    assert len(slow) == 448 and sum(slow.values()) == 14
    bw = [s.value for s in fams["fabtune_burnin_pair_bandwidth_bytes_per_second"].samples]
    assert len(bw) == 448 and min(bw) == pytest.approx(400e9 / 8 * 0.93 * 0.3, rel=0.06)
    assert max(bw) == pytest.approx(400e9 / 8 * 0.93, rel=0.06)
    info = fams["fabtune_burnin_info"].samples[0]
    assert info.labels["run_id"] == doc["run_id"] and info.value == 1


def test_nodes_table_is_per_node_and_heatmap_only_rails_that_ran():
    """Issue 10 finding 2: one row per node (its pairs, shares, slow pairs, GPUs), the node a
    finding names highlighted; a ``--rail 0`` run draws rail 0's NICs only."""
    def rail0(rnd, i):
        rnd["pairs"] = [p for p in rnd["pairs"]
                        if p["client_nic"].endswith(":mlx5_0") and p["server_nic"].endswith(":mlx5_0")]
        rnd["gpus"]["node02"][1]["xid"] = [79]
    doc = make_doc(fabric(4, 8, 2, 1), rounds=2, slow={"node03:mlx5_0": 0.3}, mutate=rail0)
    found = localise(doc)
    from tuning.burnin.localise import fabric_graph, pair_stats

    labels, _ = html_report.share_matrix(doc, pair_stats(doc, fabric_graph(doc["topology"])))
    assert labels == [f"node0{k}:mlx5_0" for k in range(1, 5)]
    nodes = html_report.render(doc, found).split("<h2>Nodes</h2>")[1].split("<h2>")[0]
    rows = re.findall(r"<tr([^>]*)><td>(node0\d)</td><td>(\d+)</td><td>([\d.]*)</td><td>([\d.]*)</td><td>(\d+)</td>"
                      r"<td>(\d+)</td>", nodes)
    assert [r[1] for r in rows] == ["node01", "node02", "node03", "node04"]
    assert all(int(r[2]) == 3 and r[3] and int(r[6]) == len(doc["rounds"][-1]["gpus"][r[1]]) for r in rows)
    by = {r[1]: r for r in rows}
    assert int(by["node03"][5]) == 3 and float(by["node03"][4]) < 0.35 and float(by["node01"][3]) > 0.85
    named = {f["target"].split(":")[0] for f in found}
    assert named and all(("bad" in r[0]) == (r[1] in named) for r in rows), (named, rows)
