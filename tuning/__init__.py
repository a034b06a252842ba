"""fabtune: tune a GPU/RDMA fabric's nodes and switches and prove every change.

The package is the one core both front ends (Nornir via ``fabtune``, Ansible via
``playbooks/``) drive. See ``docs/architecture.md`` for the rooms and the arrows.
"""

__version__ = "0.1.0"

# No import here: every ``tuning.*`` import pays for this file, the lab's stand-ins included
# (one interpreter per vendor-tool call; ``logging`` alone cost them 25 ms). The modules that
# import paramiko, netmiko and nornir silence those libraries' loggers next to the import.
