"""Lethe's Spark job library: everything the entry scripts in spark_jobs/ call.

The package is shipped next to `lethe_shared` as a zip on the job's PYTHONPATH (Glue
`--extra-py-files`, EMR Serverless `--py-files`, the local cloud's runner). Tables and S3 are
reached only through lethe_shared's adapters (catalog, registry, subjects, s3). Modules:

- `session`: the one SparkSession builder and the job's log format (correlation id on every line);
- `errors`: the errors the jobs raise on purpose;
- `arrow_bridge`: Arrow tables into Spark and back, with types intact;
- `readers`: raw CSV / JSON Lines / Parquet (optionally gzip) into Arrow, with source coordinates;
- `validate`: pure DataFrame -> DataFrame transformations that conform rows to a dataset schema;
- `layout`: where lake objects and quarantine objects live;
- `subject_rows`: the subjects of the rows the readers give (raw objects, quarantine files);
- `indexing`: the index entries of one object, from its content (subjects hashed by
  `lethe_shared.subject_hashing`);
- `objects`: which rows an object of a dataset holds, and a dataset's keys by state;
- `ingest_core`: the ingest job's arguments and its orchestration;
- `job_args`: the arguments and argparse helpers the jobs share;
- `reindexing`: objects' entries made to match their current versions, in Spark tasks (the index
  job's per-object work, also the reconcile job's repair);
- `erase_rows`: the erase job's per-object matching and rewriting, one module per format;
- `index_core`: the index job (backfill, large lake objects, re-index after deletes);
- `reconcile_core`: the reconcile job (index against a full scan, drift report, repair);
- `erase_core`: the erase job (erase and verify the objects of a frozen manifest).

No job imports another job's `*_core` or `*_tasks` module: what two jobs share is a module of
its own here or in lethe_shared.
"""
