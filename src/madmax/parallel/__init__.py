"""Strategy -> plan: sharded ops, collectives and the pipeline schedule, one module per parallelism."""
