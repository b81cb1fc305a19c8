/* store: not written yet. */
