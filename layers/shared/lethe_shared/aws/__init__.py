"""AWS plumbing: S3 objects and versions, DynamoDB paging, error codes, execution names, handler
wiring."""
