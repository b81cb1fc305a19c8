/* cmd_ingest: not written yet. */
