"""Fault-injection tests (issue 14): each injects one fault and asserts the clear error or the recovery.

docs/faults.md lists every fault with its expected behaviour and the test that injects it.
"""
