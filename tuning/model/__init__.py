"""Desired-state schema (pydantic) of nodes and switches. See :mod:`tuning.model.settings`."""

from tuning.model.settings import (  # noqa: F401
    DeviceSpec, NicQos, NicSpec, NodeSpec, SwitchRoce, SwitchSpec,
)
