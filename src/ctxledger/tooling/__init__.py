"""Operator tooling: the demo, the synthetic workload, trace files, transcripts, timelines, plots.

Nothing in the library's core imports from here (DESIGN §4): these modules sit on top of the
runtime and replay, and the ``ctxledger`` command uses them.
"""
