"""fabtune: tune a GPU/RDMA fabric's nodes and switches and prove every change.

The package is the one core both front ends (Nornir via ``fabtune``, Ansible via
``playbooks/``) drive. See ``docs/architecture.md`` for the rooms and the arrows.
"""

__version__ = "0.1.0"

import logging as _logging

# Libraries under fabtune log their own socket chatter; fabtune reports errors itself, in one line.
for _name in ("paramiko", "netmiko", "nornir"):
    _logging.getLogger(_name).addHandler(_logging.NullHandler())
