"""Lethe's Spark job library: everything the entry scripts in spark_jobs/ call.

The package is shipped next to `lethe_shared` as a zip on the job's PYTHONPATH (Glue
`--extra-py-files`, EMR Serverless `--py-files`, the local cloud's runner). Modules:

- `session`: the one SparkSession builder and the job's log format (correlation id on every line);
- `arrow_bridge`: Arrow tables into Spark and back, with types intact;
- `readers`: raw CSV / JSON Lines / Parquet (optionally gzip) into Arrow, with source coordinates;
- `validate`: pure DataFrame -> DataFrame transformations that conform rows to a dataset schema;
- `layout`: where lake objects and quarantine objects live;
- `s3io`: S3 and DynamoDB I/O (boto3), used only by the job's orchestration;
- `ingest_core`: the ingest job's arguments and its orchestration.
"""
