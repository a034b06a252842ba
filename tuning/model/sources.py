"""The files Ansible reads as inventory sources when given an inventory folder, so that fabtune,
which reads only ``hosts.yaml``, refuses a folder in which Ansible would see more.

``ansible-inventory -i INV`` (``InventoryManager.parse_source``) tries every entry of the folder,
sorted, recursing into sub-folders, as an inventory source, skipping names that match
``IGNORED``: hidden names, ``host_vars``, ``group_vars``, ``vars_plugins`` and the extensions of
``INVENTORY_IGNORE_EXTS`` (default ``REJECT_EXTS + ['.orig', '.cfg', '.retry']``). A
``hosts.yml`` beside ``hosts.yaml``, an ``extra.yml``, an ``.ini`` or a ``.json`` would add hosts
or variables fabtune never sees. The lists below are ansible-core's defaults (2.x), compared with
the installed ansible-core by ``tests/input/test_inventory_fuzz.py``; a site's ``ansible.cfg``
may widen them, fabtune does not read it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tuning.errors import InputError

#: ansible.constants.REJECT_EXTS
REJECT_EXTS = (".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst")
#: INVENTORY_IGNORE_EXTS's default (ansible/config/base.yml)
IGNORE_EXTS = REJECT_EXTS + (".orig", ".cfg", ".retry")
#: ansible.inventory.manager.IGNORED_ALWAYS
IGNORED_ALWAYS = (r"^\.", "^host_vars$", "^group_vars$", "^vars_plugins$")
IGNORED = re.compile("|".join(IGNORED_ALWAYS + tuple(f"{re.escape(x)}$" for x in IGNORE_EXTS)))


def other_sources(folder: Path, hosts_file: Path, seen: set[Path] | None = None) -> list[Path]:
    """Every file under ``folder`` Ansible would read as an inventory source, but ``hosts_file``
    (a folder reached twice through symlinks is read once)."""
    seen = set() if seen is None else seen
    seen.add(folder.resolve())
    out: list[Path] = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if IGNORED.search(entry.name) or entry == hosts_file:
            continue
        if not entry.is_dir():
            out.append(entry)
        elif entry.resolve() not in seen:
            out += other_sources(entry, hosts_file, seen)
    return out


def check_single_source(folder: Path, hosts_file: Path) -> None:
    """Refuse a second inventory source in the inventory folder.

    Raises:
        InputError: naming the first such file.
    """
    extra = other_sources(folder, hosts_file)
    if extra:
        raise InputError(str(extra[0]), "-", f"Ansible would read it as an inventory source; fabtune reads only "
                         f"{hosts_file.name}: move it out of {folder} (allowed there: {hosts_file.name}, "
                         f"group_vars/, host_vars/, hidden files, {', '.join(IGNORE_EXTS)} files)")
