"""The lab: a digital twin of a GPU fabric on one machine (DESIGN.md, "The lab").

Nodes are real SSH endpoints whose shells see a private sysroot and vendor-tool
stand-ins; switches are FakeNOS devices speaking the NVUE CLI; a fabric model
computes RDMA test results from every setting on the path. The engine never
knows it talks to the lab: only the inventory (``inventory/lab/``) differs.
"""
