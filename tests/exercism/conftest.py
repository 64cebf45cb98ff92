"""Five Exercism exercises (MIT, see LICENSE) for tests/test_exercism.py; their own test files
are data for the harness, not part of this suite."""

collect_ignore_glob = ["*"]
