"""Boot persistence: the files :func:`tuning.render.node_files` renders, laid on the node
(sysctl.d drop-in, the NIC setup script and its systemd unit). A file absent before a
rollout is removed again on restore.
"""

from __future__ import annotations

import base64

from tuning.model import NodeSpec
from tuning.node.base import ABSENT, Domain, NodeFacts, decode
from tuning.transport.base import q, sysroot_path

#: device path -> mode of the persisted files
MODES = {"/usr/local/sbin/fabtune-nic-setup": "0755"}


class FilesDomain(Domain):
    """One key per file: ``file/<path>`` -> its whole content."""

    name = "files"

    def __init__(self, render: "callable[[NodeSpec], dict[str, str]]"):
        self._render = render

    def read_script(self, spec: NodeSpec, sysroot: str) -> list[str]:
        return [f"rb file{p} {q(sysroot_path(sysroot, p))}" for p in self._render(spec)]

    def current(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"file{p}": decode(facts.raw.get(f"file{p}", ABSENT)) for p in self._render(spec)}

    def desired(self, spec: NodeSpec, facts: NodeFacts) -> dict[str, str]:
        return {f"file{p}": content for p, content in self._render(spec).items()}

    def command(self, key: str, value: str, spec: NodeSpec, facts: NodeFacts, sysroot: str) -> str:
        path = key[len("file"):]
        target = q(sysroot_path(sysroot, path))
        if value == ABSENT:
            return f"rm -f {target}"
        data = base64.b64encode(value.encode()).decode()
        mode = MODES.get(path, "0644")
        return f"printf %s {data} | base64 -d > {target} && chmod {mode} {target}"
