#!/usr/bin/env bash
# Issue 7 part B device check (< 2 min): on a real GPU host, NVML discovery (python -m tuning.nvml,
# nvidia-ml-py) against `nvidia-smi topo -m`, side by side per GPU: NUMA node, CPU affinity, nearest NIC
# and link class. Read-only: changes nothing on the host.
#
# Two steps:
#   here (dev machine, repo root):   bash tests/device/device_check.sh --prepare
#       builds build/devdeps/ (ignored by git; carry it): pynvml from the nvidia-ml-py wheel and
#       pydantic & co copied from .venv (the device machine reaches no registry)
#   device (repo root, the script copied into the tree or fed on stdin):
#       run(command="bash tests/device/device_check.sh", carry=["build/devdeps"])     # or: bash -s < device_check.sh
# Everything is written under $OUT (default /tmp/fabtune-device-check); summary.txt is the note.
set -u
if [ "${1:-}" = "--prepare" ]; then
  set -e
  rm -rf build/devdeps && mkdir -p build/devdeps/wheel
  .venv/bin/pip download --no-deps -q -d build/devdeps/wheel nvidia-ml-py
  (cd build/devdeps && python3 -m zipfile -e wheel/*.whl . && rm -rf wheel)
  SP=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  for p in pydantic pydantic_core typing_extensions.py annotated_types typing_inspection; do
    [ -e "$SP/$p" ] && cp -r "$SP/$p" build/devdeps/
  done
  du -sh build/devdeps; exit 0
fi
OUT=${OUT:-/tmp/fabtune-device-check}
mkdir -p "$OUT"
PY=python3; [ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONPATH="$PWD/build/devdeps:$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "# host: $(hostname)  kernel: $(uname -r)  python: $($PY -V 2>&1)"
  timeout 20 nvidia-smi --query-gpu=index,pci.bus_id,name,driver_version --format=csv,noheader 2>&1
  echo "# pynvml: $($PY -c 'import pynvml; print(pynvml.__file__)' 2>&1 | tail -1)"
} > "$OUT/env.txt"
timeout 30 nvidia-smi topo -m > "$OUT/nvidia_smi_topo_m.txt" 2>&1; echo "rc=$?" > "$OUT/nvidia_smi_topo_m.rc"
timeout 20 nvidia-smi -L > "$OUT/nvidia_smi_L.txt" 2>&1
for f in /proc/driver/nvidia/gpus/*/information; do
  [ -f "$f" ] && { echo "== $f"; cat "$f"; } >> "$OUT/proc_driver_nvidia_information.txt"
done
timeout 60 $PY -m tuning.nvml --json > "$OUT/nvml.json" 2> "$OUT/nvml.stderr"; echo "rc=$?" > "$OUT/nvml.rc"
timeout 30 $PY - "$OUT" > "$OUT/summary.txt" 2>&1 <<'EOF'
import json, sys
from pathlib import Path
from tuning.parsers.topology import parse_nvidia_smi_topo, parse_gpu_information
from tuning.node.topology import from_smi
out = Path(sys.argv[1])
print((out / "env.txt").read_text().strip())
try:
    smi = from_smi(parse_nvidia_smi_topo((out / "nvidia_smi_topo_m.txt").read_text()))
except Exception as e:
    smi = None; print(f"nvidia-smi topo -m unreadable: {e}")
try:
    nv = json.loads((out / "nvml.json").read_text())
except Exception as e:
    nv = None; print(f"tuning.nvml failed: {e}: {(out / 'nvml.stderr').read_text()[-400:]}")
if smi and nv:
    sg = {g.index: g for g in smi.gpus}; sl = {l.gpu: l for l in smi.links}
    ng = {g["index"]: g for g in nv["gpus"]}; nl = {l["gpu"]: l for l in nv["links"]}
    print("GPU | NUMA smi/nvml | CPUs smi / nvml | nearest NIC smi / nvml (nvml links from sysfs PCI paths) | verdict")
    bad = 0
    for i in sorted(set(sg) | set(ng)):
        a, b = sg.get(i), ng.get(i)
        al, bl = sl.get(i), nl.get(i)
        same = bool(a and b and a.numa_node == b["numa_node"] and a.cpus == b["cpus"]
                    and (al and al.nearest_nic, al and al.link) == (bl and bl["nearest_nic"], bl and bl["link"]))
        bad += not same
        print(f"GPU{i} | {a and a.numa_node}/{b and b['numa_node']} | {a and a.cpus} / {b and b['cpus']} | "
              f"{al and (al.nearest_nic, al.link)} / {bl and (bl['nearest_nic'], bl['link'])} | {'MATCH' if same else 'DIFF'}")
    print("sources (nvml side):", json.dumps(nv.get("sources", {}), sort_keys=True))
    print(f"RESULT: {len(set(sg) | set(ng)) - bad} GPU(s) agree, {bad} differ")
info = out / "proc_driver_nvidia_information.txt"
if info.is_file():
    for block in info.read_text().split("== ")[1:]:
        name, _, text = block.partition("\n")
        try:
            r = parse_gpu_information(text); print(f"{name}: minor {r.minor}, model {r.model}")
        except Exception as e:
            print(f"{name}: unreadable ({e})")
EOF
cat "$OUT/summary.txt"
