"""Conformance suites: one set of tests run against every implementation of an
interface (every tracking store), the way Optuna's storage tests run over all storages."""
