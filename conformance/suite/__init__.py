"""The conformance suite: the pytest plugin (`plugin`, `gpus`, `session`) and the properties (`test_*.py`).

Run it from a checkout (`pytest -n auto conformance`) or, installed, from anywhere
(`pytest --pyargs conformance --conformance-kernel NAME`).
"""
