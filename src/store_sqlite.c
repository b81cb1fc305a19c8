/* store_sqlite: not written yet. */
