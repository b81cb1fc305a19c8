/* ingest: not written yet. */
