"""The local development stack: the KRaft broker, the demo and sample records. Only `cli` and the tests import
it."""
