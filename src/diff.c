/* diff: not written yet. */
