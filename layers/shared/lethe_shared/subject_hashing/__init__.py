"""Subject hashing: everything that turns a subject id or a row's subject value into a keyed
hash, for ingestion, indexing, erasure and verification alike.

- `canonical`: the canonical text of subject values (`canonical_text`, `composite_text`);
- `keys`: the hash key and keyed hashes (`subject_hash`, `hash_of_id`, `hash_of_keys`,
  `load_hash_key`, `hmac_sha256`);
- `values`: subject values typed as the ingest job's validation (Spark) types them;
- `records`: the record path: subject texts of Python rows and JSON records, and their hashes;
- `arrow`, `arrow_digests`: the Arrow path: subjects of Arrow columns hashed vectorised.

`arrow`, `arrow_digests` and `records` import pyarrow: import them only where it is installed.
"""
