/* token: not written yet. */
