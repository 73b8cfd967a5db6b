"""Code shared by Lethe's Lambda functions, Spark jobs, CLI and tests.

Deployed as the `SharedLayer` Lambda layer, zipped into the Spark jobs' `--py-files`, and put on
the test `pythonpath`. It must import without AWS credentials or environment variables: every
setting is read by a handler's `load_settings` at cold start, never at import time.
"""
