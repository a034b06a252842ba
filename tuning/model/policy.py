"""The rollout policy of a run: batches (canary), failure caps, settle time, regression handling,
per-phase timeouts, pass marks and the incast check. One per run, from the inventory's ``all``
group variable ``fabtune_rollout`` (:func:`tuning.inventory.load`), each key overridable on the
command line (:meth:`RolloutPolicy.override`).

Semantics follow ansible-core's rolling updates ("Controlling playbook execution: strategies and
more", https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_strategies.html, sections
"Setting the batch size with serial" and "Setting a maximum failure percentage"):

- ``serial``: a list of batch sizes; an int is a count of nodes, ``"N%"`` a share of all selected
  nodes (``int(N / 100 * nodes)``, at least 1, as ansible-core's ``pct_to_int``); the last entry
  repeats until every node has had its batch. Default ``["100%"]``: one batch, fabtune's behaviour
  before batches.
- ``max_fail_percentage``: per batch; the run halts when failed / batch nodes x 100 EXCEEDS it
  (equalling it does not halt, as Ansible counts). Default 0: any failure halts.
- ``max_failed_devices``: fabtune's own cap over the whole run (Ansible has none): total failed
  devices above it halts, even when no batch exceeded its percentage. Default None: no global cap.

Defaults of the other keys: ``settle_s`` 0 (verify at once), ``on_regression`` ``restore-batch``
(earlier verified batches are kept, as a halted Ansible play keeps its done batches),
``timeouts`` connect 30 s (OpenSSH-style connect timeout), collect 120 s, apply 600 s (NVUE's
default confirm window is 600 s: a push longer than that outlasts it), verify None (derived from
the expected verification time), ``thresholds`` the values of
:class:`tuning.verify.runner.Thresholds`, ``incast`` enabled with k = 4 senders, ``nccl`` off
(:class:`NcclPolicy`: nccl-tests needs GPUs and an MPI launcher on the nodes).
"""

from __future__ import annotations

import re
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuning.errors import InputError

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)
#: the inventory key (``all`` group only)
POLICY_KEY = "fabtune_rollout"
_PCT = re.compile(r"([1-9][0-9]?|100)%")
#: what one ``serial`` entry may be
SERIAL_ALLOWED = "an integer 1..1000000 or 'N%' (1..100)"


class PhaseTimeouts(BaseModel):
    """Seconds one device may take per phase before it is counted unreachable (``DeviceTimeout``).

    Attributes:
        connect_s: open an SSH session or a switch API session (1..3600).
        collect_s: read a device's state, one round trip (1..3600).
        apply_s: push and read back one device's plan (1..3600).
        verify_s: the whole verification of one batch; None: derived from its expected time
            (:func:`tuning.verify.runner.expected_seconds`) (1..86400).
    """

    model_config = _STRICT
    connect_s: int = Field(30, ge=1, le=3600)
    collect_s: int = Field(120, ge=1, le=3600)
    apply_s: int = Field(600, ge=1, le=3600)
    verify_s: Optional[int] = Field(None, ge=1, le=86400)


class PolicyThresholds(BaseModel):
    """Pass marks (:class:`tuning.verify.runner.Thresholds`): Gb/s, fraction of line rate, us, percent.

    ``min_bw_share`` (0..1): a pair's bandwidth at least this share of the slower end's link
    speed; None: not judged. ``noise_pct`` (0..50): the run-to-run spread of one perftest sample
    this fabric shows (default 1 %, a quiet fabric; 0: one sample, compared exactly),
    ``confidence`` (0.51..0.9999) of a regression verdict, ``max_samples`` (1..64) per pair per
    verification (:mod:`tuning.verify.samples`).
    """

    model_config = _STRICT
    min_bw_gbps: Union[int, float] = Field(300.0, ge=0, le=100000)
    min_bw_share: Optional[Union[int, float]] = Field(None, ge=0, le=1)
    max_lat_us: Union[int, float] = Field(10.0, ge=0, le=1000000)
    bw_drop_pct: Union[int, float] = Field(5.0, ge=0, le=100)
    lat_rise_pct: Union[int, float] = Field(15.0, ge=0, le=10000)
    noise_pct: Union[int, float] = Field(1.0, ge=0, le=50)
    confidence: Union[int, float] = Field(0.99, ge=0.51, le=0.9999)
    max_samples: int = Field(8, ge=1, le=64)


class IncastPolicy(BaseModel):
    """The k-to-1 incast check per changed leaf (:mod:`tuning.verify.incast`): ``k`` senders (2..16).
    A leaf no incast can prove (fewer than 2 same-rail senders on other nodes) is the finding
    ``incast-not-run`` in the report; with ``required`` it also fails the verification (a check that
    ran nothing does not pass)."""

    model_config = _STRICT
    enabled: bool = True
    k: int = Field(4, ge=2, le=16)
    required: bool = False


class NcclPolicy(BaseModel):
    """nccl-tests across the selected nodes after the pairs (:mod:`tuning.verify.nccl`), opt-in:
    ``tests`` (``all_reduce_perf``, ``alltoall_perf``) each one MPI job with a process per node,
    launched with the node's NCCL environment, sizes ``min_bytes``..``max_bytes`` (8..2^34, x2 per
    step; default 8 MiB..128 MiB, burn-in's), its bus bandwidth judged against the baseline as a
    pair's. With ``pairs``, also one job per pair of nodes (consecutive in inventory order: a node
    pair's own links, as nccl-tests is run node pair by node pair to find a slow node). A job that
    cannot run (nccl-tests or mpirun missing, a misconfigured launch) is the finding
    ``nccl-not-run``; with ``required`` it also fails the verification."""

    model_config = _STRICT
    enabled: bool = False
    required: bool = False
    pairs: bool = False
    tests: list[Literal["all_reduce_perf", "alltoall_perf"]] = Field(
        default_factory=lambda: ["all_reduce_perf"], min_length=1, max_length=2)
    min_bytes: int = Field(8388608, ge=8, le=2**34)
    max_bytes: int = Field(134217728, ge=8, le=2**34)

    @model_validator(mode="after")
    def _sizes(self) -> "NcclPolicy":
        if len(set(self.tests)) < len(self.tests):  # one job (and one baseline entry) per test and nodes
            raise ValueError(f"tests {self.tests} names a test twice; allowed: each of all_reduce_perf, alltoall_perf once")
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes {self.min_bytes} > max_bytes {self.max_bytes}; allowed: min_bytes <= max_bytes")
        return self


class RolloutPolicy(BaseModel):
    """How a rollout proceeds (see the module docstring for each default and its source).

    Attributes:
        serial: batch sizes: ints (nodes) and ``"N%"`` strings (1..100 % of the selected nodes).
        batch_by: ``leaf`` (a batch fills one leaf before the next), ``rail`` (nodes ordered by
            their first NIC's rail, then leaf) or ``none`` (inventory order).
        max_fail_percentage: 0..100, per batch, exceeded halts.
        max_failed_devices: whole run, exceeded halts; None: no global cap.
        settle_s: seconds between a batch's apply and its verification (0..3600).
        on_regression: ``restore-batch`` (keep earlier batches) or ``restore-all``.
        max_connections: the most device sessions a ``plan`` holds at once (1..1,000,000, default
            1,024): it connects, collects and closes that many at a time, so a fleet larger than
            the file-descriptor limit is planned; a push keeps its sessions to the end (restore).
    """

    model_config = _STRICT
    serial: list[Union[int, str]] = Field(default_factory=lambda: ["100%"], min_length=1, max_length=64)
    batch_by: Literal["leaf", "rail", "none"] = "leaf"
    max_fail_percentage: Union[int, float] = Field(0, ge=0, le=100)
    max_failed_devices: Optional[int] = Field(None, ge=0, le=1000000)
    settle_s: Union[int, float] = Field(0, ge=0, le=3600)
    on_regression: Literal["restore-batch", "restore-all"] = "restore-batch"
    max_connections: int = Field(1024, ge=1, le=1000000)
    timeouts: PhaseTimeouts = Field(default_factory=PhaseTimeouts)
    thresholds: PolicyThresholds = Field(default_factory=PolicyThresholds)
    incast: IncastPolicy = Field(default_factory=IncastPolicy)
    nccl: NcclPolicy = Field(default_factory=NcclPolicy)

    @field_validator("serial")
    @classmethod
    def _serial(cls, v: list) -> list:
        for i, x in enumerate(v, 1):
            if isinstance(x, bool) or (isinstance(x, int) and not 1 <= x <= 1000000) or (
                    isinstance(x, str) and not _PCT.fullmatch(x)):
                raise ValueError(f"entry {i}: {x!r:.40} is not a batch size; allowed: {SERIAL_ALLOWED}")
        return v

    def sizes(self, n_nodes: int) -> list[int]:
        """Batch sizes (nodes) for ``n_nodes`` selected nodes: each ``serial`` entry resolved, the
        last repeated, the last batch cut to what is left. ``[1, 5, "20%"]`` of 100: ``[1, 5, 20,
        20, 20, 20, 14]``; the default of 4: ``[4]``; 0 nodes: ``[]``."""
        out, left = [], n_nodes
        i = 0
        while left > 0:
            x = self.serial[min(i, len(self.serial) - 1)]
            size = x if isinstance(x, int) else max(1, int(int(x[:-1]) / 100 * n_nodes))
            out.append(min(size, left))
            left -= out[-1]
            i += 1
        return out

    def override(self, **flags: object) -> "RolloutPolicy":
        """A copy with the CLI's values (None: not given, keeps the inventory's). Keys: the
        top-level fields, plus ``min_bw_gbps``, ``max_lat_us``, ``min_bw_share`` (thresholds) and
        ``incast_enabled``. Validated as the inventory is.

        Raises:
            InputError: a value outside its range (names the flag).
        """
        data = self.model_dump()
        for k, v in flags.items():
            if v is None:
                continue
            if k in PolicyThresholds.model_fields:
                data["thresholds"][k] = v
            elif k == "incast_enabled":
                data["incast"]["enabled"] = v
            else:
                data[k] = v
        try:
            return RolloutPolicy.model_validate(data)
        except ValidationError as e:
            key, problem = explain(e)
            name = key.split(".")[-1]
            flag = {"max_failed_devices": "max_failed", "enabled": "no_incast"}.get(name, name)
            shown = f"{flags.get(name)!r:.60}"
            if name == "serial" and ": " in problem:  # "entry 2: 0 is not a batch size; ..." / "65 entries: ..."
                shown, problem = problem.split(": ", 1)
            else:  # the value once, as the key: "--batch-by: 'LEAF': not allowed; allowed: ..."
                problem = problem.removeprefix(shown + " ").removeprefix("is ")
            raise InputError(f"--{flag.replace('_', '-')}", shown, problem) from None




def explain(err) -> tuple[str, str]:
    """A pydantic ValidationError of :class:`RolloutPolicy` as ``(dotted key, problem with what is
    allowed)``: the key as written (``timeouts.apply_s``; never a union member such as
    ``serial.0.int``), the range or values it allows."""
    from tuning.model.messages import field_at, validation_error

    first = err.errors()[0]
    cls, kept = RolloutPolicy, []
    for part in (str(x) for x in first["loc"]):
        fields = getattr(cls, "model_fields", {})
        if part in fields:
            kept.append(part)
            ann = fields[part].annotation
            cls = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else next(
                (a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        elif first["type"] == "extra_forbidden" and part == str(first["loc"][-1]):
            kept.append(part)
    got = first.get("input")
    if first["type"] == "literal_error":  # the allowed values once
        return ".".join(kept), f"{got!r:.60} is not allowed; allowed: {first['ctx']['expected']}"
    if kept == ["serial"]:
        if first["type"] in ("too_long", "too_short"):
            n = len(got) if isinstance(got, list) else "?"
            return "serial", f"{n} entries: {'too many' if n != 0 else 'none'}; allowed: 1..64 entries, " \
                             f"each {SERIAL_ALLOWED}"
        if first["type"] == "value_error":  # _serial: "entry N: X is not a batch size; allowed: ..."
            return "serial", first["msg"].removeprefix("Value error, ")
        if len(first["loc"]) > 1 and isinstance(first["loc"][1], int):  # an entry of the wrong type
            return "serial", f"entry {first['loc'][1] + 1}: {got!r:.40} is not a batch size; allowed: {SERIAL_ALLOWED}"
        return "serial", f"{got!r:.60} is not a batch size list; allowed: 1..64 entries, each {SERIAL_ALLOWED}"
    _, info = field_at(RolloutPolicy, kept)
    lo = next((m.ge for m in getattr(info, "metadata", []) if hasattr(m, "ge")), None)
    hi = next((m.le for m in getattr(info, "metadata", []) if hasattr(m, "le")), None)
    if first["type"] != "extra_forbidden" and lo is not None and hi is not None:
        ann = str(getattr(info, "annotation", ""))
        what = "an integer" if "float" not in ann else "a number"
        return ".".join(kept), f"{got!r:.60} is not allowed; allowed: {what} in {lo}..{hi}" + (
            " or null" if "None" in ann else "")
    plain = validation_error(err, RolloutPolicy, {}, "all")
    return ".".join(kept) or "-", plain.problem.removesuffix(" (host all)")


def parse_serial(text: str) -> list[Union[int, str]]:
    """``--serial 1,5,20%`` as a ``serial`` list: ``[1, 5, "20%"]`` (checked by :class:`RolloutPolicy`).

    Raises:
        InputError: an entry that is neither digits nor ``N%`` (named by its 1-based position).
    """
    out: list[Union[int, str]] = []
    for i, part in enumerate(str(text).split(","), 1):
        p = part.strip()
        if re.fullmatch(r"[0-9]{1,7}", p):
            out.append(int(p))
        elif _PCT.fullmatch(p):
            out.append(p)
        else:
            raise InputError("--serial", f"entry {i}", f"{p!r:.40} is not a batch size; allowed: a comma list of "
                             f"{SERIAL_ALLOWED}, e.g. 1,5,20%")
    return out
