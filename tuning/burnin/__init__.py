"""Burn-in and node health (issue 10): repeated all-pairs RDMA rounds, NIC / PCIe / GPU health
between rounds (:mod:`tuning.burnin.collect`, :mod:`tuning.burnin.run`, :mod:`tuning.burnin.health`),
then localisation, drain and reports (``localise``, ``drain``, ``html_report``, ``prom``).
The document they share is described in docs/burnin.md.
"""
